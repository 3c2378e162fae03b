"""The ``liftguard`` command line.

The application layer on top of the core: it reads files and prints, and its
commands import adapters and the skeleton store lazily, inside the command.
Nothing else in :mod:`guardrail` imports them.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from ._common import oracle_coverage

__all__ = ["main", "oracle_coverage"]


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from ._calibrate import cmd_calibrate

    return cmd_calibrate(args)


def _cmd_demo(args: argparse.Namespace) -> int:
    from ._demo import cmd_demo

    return cmd_demo(args)


def _cmd_stress(args: argparse.Namespace) -> int:
    from ._stress import cmd_stress

    return cmd_stress(args)


def _cmd_eval(args: argparse.Namespace) -> int:
    from ._eval import cmd_eval

    return cmd_eval(args)


def _add_certificate_options(parser: argparse.ArgumentParser) -> None:
    """The risk target and the streaming certificate's settings (calibrate and eval)."""
    from .._scores import TRACE_SKELETONS

    parser.add_argument("--risk", type=float, required=True, help="target selective risk h*")
    parser.add_argument("--delta", type=float, default=0.05, help="calibration failure probability")
    parser.add_argument("--skeleton", default="uniform", choices=TRACE_SKELETONS)
    parser.add_argument(
        "--aggregate",
        default="lowest",
        choices=("mean", "min", "lowest"),
        help="how token lifts combine (default: mean of the --lowest-k weakest)",
    )
    parser.add_argument(
        "--lowest-k", type=int, default=2, help="weakest tokens the 'lowest' aggregate averages"
    )
    parser.add_argument("--boundary", default="betting", choices=("betting", "paper"))
    parser.add_argument(
        "--clip",
        type=float,
        default=None,
        help="clipping bound B (default: log(0.8 |V|) for the uniform skeleton, else 12)",
    )
    parser.add_argument("--min-tokens", type=int, default=1)
    parser.add_argument(
        "--stream-delta", type=float, default=0.05, help="evidence level of the in-stream boundary"
    )


def _build_parser() -> argparse.ArgumentParser:
    from .._scores import BASELINES

    parser = argparse.ArgumentParser(
        prog="liftguard", description="Certify or block LLM answers while they stream."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "calibrate",
        help="calibrate a threshold on labelled traces",
        description="Calibrate tau on labelled traces (JSONL trace format) and report "
        "coverage, risk and the oracle coverage on a held-out split.",
    )
    p.add_argument("--traces", required=True, help="JSONL trace file")
    _add_certificate_options(p)
    p.add_argument("--method", default="ltt", choices=("ltt", "paper"))
    p.add_argument(
        "--score",
        default="lift",
        choices=("lift", *BASELINES),
        help="decision score: the streaming lift policy or a baseline",
    )
    p.add_argument(
        "--cal-fraction",
        type=float,
        default=0.5,
        help="share of traces used for calibration; the rest is the test split",
    )
    p.add_argument(
        "--n-cal", type=int, default=None, help="use only the first N calibration traces"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="repeat over this many random splits (seeds seed, seed+1, ...) and summarise",
    )
    p.add_argument("--out", default=None, help="write the calibration as JSON here")
    p.set_defaults(func=_cmd_calibrate)

    e = sub.add_parser(
        "eval",
        help="compare the lift certificate with baselines over repeated splits",
        description="Calibrate the lift certificate and each baseline (entropy, mean_logprob, "
        "min_logprob, nll) by the same risk-control procedure on the same random 50/50 "
        "splits, and report test coverage, risk, risk violations, AUROC and tokens read.",
    )
    e.add_argument("--traces", required=True, help="JSONL trace file")
    _add_certificate_options(e)
    e.add_argument("--splits", type=int, default=20)
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--top-k", type=int, default=None, help="keep only the top K alternatives")
    e.add_argument("--json", action="store_true", help="print one JSON object")
    e.add_argument(
        "--plot", metavar="DIR", default=None,
        help="write risk-coverage, score and tokens-read figures and report.md into DIR",
    )  # fmt: skip
    e.set_defaults(func=_cmd_eval)

    d = sub.add_parser(
        "demo",
        help="stream a local model's answers and certify or block them live (offline)",
        description="Runs SmolLM2-135M-Instruct locally (llama.cpp) on a few real questions "
        "and shows each answer's tokens, the running evidence against tau and the verdict. "
        'Needs pip install "liftguard[local]"; downloads nothing.',
    )
    d.add_argument(
        "--mode",
        default="buffered",
        choices=("buffered", "passthrough"),
        help="buffered: show an answer only once certified; passthrough: show at once",
    )
    d.add_argument("--question", action="append", help="ask your own question (repeatable)")
    d.add_argument("-n", type=int, default=12, help="number of shipped questions to ask")
    d.add_argument("--max-tokens", type=int, default=24)
    d.add_argument("--plain", action="store_true", help="no live status line")
    d.set_defaults(func=_cmd_demo)

    st = sub.add_parser(
        "stress",
        help="skeleton-corruption study: risk and coverage change vs the eta bound",
        description="Calibrate with a unigram skeleton built from the calibration half, then "
        "decide the test half with the skeleton corrupted (noise, vocabulary shift, uniform, "
        "adversarial; 25/50/75%%) and report risk and coverage changes next to the "
        "eta-robustness bound.",
    )
    st.add_argument("--traces", required=True)
    st.add_argument("--risk", type=float, required=True)
    st.add_argument("--delta", type=float, default=0.05)
    st.add_argument("--aggregate", default="min", choices=("mean", "min", "lowest"))
    st.add_argument("--lowest-k", type=int, default=2)
    st.add_argument("--seed", type=int, default=0)
    st.add_argument("--smoothing", type=float, default=0.01, help="unigram add-k smoothing")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=_cmd_stress)

    from ._skeleton import add_skeleton_parser

    add_skeleton_parser(sub)

    from ._traces_cmd import add_traces_parser

    add_traces_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    if not (0.0 < getattr(args, "cal_fraction", 0.5) <= 1.0):
        parser.error("--cal-fraction must be in (0, 1]")
    func = args.func
    return int(func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
