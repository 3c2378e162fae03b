"""The arguments of ``liftguard fit`` (the command itself: :mod:`._fit`)."""

from __future__ import annotations

import argparse
from typing import Any

from ._certify import add_skeleton_spec_option
from ._common import add_procedure_option, fraction, integer, output_file, positive, probability
from ._fit import cmd_fit

__all__ = ["TRAFFIC_EARLY_BLOCK", "add_fit_parser"]

TRAFFIC_EARLY_BLOCK = 0.95
"""``calibrate --certificate ... --margins-from``'s default quantile: of 0.99, 0.95, 0.9
and 0.8, the one ``studies/transfer/traffic_margins.py``'s in-domain comparison
chooses by the rule written down before it ran (``margin_quantile.chosen``)."""


def _early_block(text: str) -> float | None:
    """``none``, or a quantile in (0, 1]."""
    return None if text.strip().lower() == "none" else fraction(text)


class _Given(argparse.Action):
    """Stores the value and notes that it was given (``--select coverage`` tries several
    early-block quantiles only when ``--early-block`` is not)."""

    def __call__(
        self, parser: Any, namespace: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_given", True)


def add_fit_parser(sub: Any) -> None:
    """The ``fit`` subcommand (its defaults: :class:`guardrail.fitting.FitOptions`')."""
    from guardrail._fit._statistic import DEFAULT_ALTERNATIVES
    from guardrail._scores import TRACE_SKELETONS
    from guardrail.fitting import FitOptions

    default = FitOptions()

    p = sub.add_parser(
        "fit",
        help="fit a streaming statistic on labelled traces and write a certificate",
        description="Fit a logistic statistic over per-token features (logprob, alternatives' "
        "margin and entropy, skeleton lifts) on one part of a model's labelled traces, "
        "calibrate its threshold on the disjoint rest by the same risk control as "
        "'calibrate', and write the certificate (statistic, tau, model, context, split).",
    )
    p.add_argument(
        "--traces",
        required=True,
        help="labelled trace file: JSONL, or Parquet if it ends with .parquet; a local path "
        "or a URL such as s3://bucket/key",
    )
    p.add_argument("--out", required=True, type=output_file, help="certificate file to write")
    p.add_argument(
        "--risk",
        type=probability,
        default=default.risk,
        help=f"target selective risk (default {default.risk})",
    )
    p.add_argument("--delta", type=probability, default=default.delta)
    add_procedure_option(p)
    p.add_argument(
        "--group",
        default=default.group,
        choices=("api", "local", "lift"),
        help="features by what the stream supplies: api (logprobs + alternatives), local "
        "(+ exact entropies), lift (+ the skeleton's log-probability; default)",
    )
    p.add_argument(
        "--features",
        default=None,
        metavar="NAME,...",
        help="the features, comma-separated '[scope:]base.aggregate[@level]' names (e.g. "
        "logprob.min,lift.sum,length.count,final:logprob.min), instead of --group's preset; "
        "bases: logprob, margin, entropy, rank, temperature_lift, exact_entropy, lift, "
        "length; scopes: final (after the answer's 'Answer:' or \\boxed{), code (inside a "
        "fenced code block), number (tokens with a digit)",
    )
    p.add_argument(
        "--scopes",
        default=None,
        metavar="auto|none|SCOPE,...",
        help="with --group: also read the log-likelihood (scope:logprob.sum) of these scopes; "
        "auto (default): each that at least a tenth of the fitting answers have tokens in "
        "(a worked solution's numbers and final answer, a program's code); none: the preset "
        "alone",
    )
    p.add_argument(
        "--form",
        default=default.form,
        choices=("answer", "monotone"),
        help="answer: any features, exact early verdicts from bounds (default); monotone: "
        "only features that move one way, blocks as soon as the score falls below tau",
    )
    p.add_argument(
        "--skeleton",
        default=default.skeleton,
        choices=TRACE_SKELETONS,
        help="skeleton of the lift features (default prompt-free)",
    )
    add_skeleton_spec_option(p)
    p.add_argument(
        "--fit-fraction",
        type=fraction,
        default=default.fit_fraction,
        help="share of the traces the statistic is fitted on; tau is calibrated on the rest "
        "(default 0.5). 1: fit on all of them and calibrate tau on other answers with "
        "'liftguard calibrate --certificate' (until then the certificate certifies nothing)",
    )
    p.add_argument(
        "--seed", type=integer(0), default=default.seed, help="seed of the fit/calibration split"
    )
    p.add_argument("--l2", type=positive, default=default.l2, help="L2 penalty of the fit")
    p.add_argument(
        "--select",
        choices=("none", "coverage"),
        default=default.select,
        help="coverage: choose among the features at three penalties, the features with "
        "length-robust or scoped aggregates added where the answers are long or have a "
        "final answer or code block, and the single scores "
        "(sequence log-likelihood, lowest and mean logprob), each with early-block "
        "quantiles none, 0.99, 0.95 and 0.9 (only --early-block's, when given), by "
        "cross-validated coverage of the replayed rule at --risk on the fitting answers "
        "(default none: the features as given)",
    )
    p.add_argument(
        "--early-block",
        type=_early_block,
        action=_Given,
        default=default.early_block,
        metavar="Q",
        help="also block as soon as the score so far plus a margin is below tau: per "
        "position, the Q quantile of how far a correct fitting answer's score still rose "
        f"from there (calibration replays it; default {default.early_block}; 'none': only "
        "the exact early blocks)",
    )
    p.add_argument(
        "--early-block-share",
        type=_early_block,
        default=default.early_block_share,
        metavar="S",
        help="widen the early-block margins by one factor until this share of the correct "
        "fitting answers never rises past them at any position (per position, a long "
        f"answer's many positions block many more; default {default.early_block_share}; "
        "'none': the per-position quantile alone)",
    )
    p.add_argument(
        "--early-block-tail",
        choices=("flat", "sqrt"),
        default=default.early_block_tail,
        help="the early-block margins past the positions 20 correct fitting answers reach, "
        "up to the token limit: 'flat', the largest margin of the last half of those "
        "positions; 'sqrt', falling as c/sqrt(t), so that margins fitted on short answers "
        f"block a longer one about as early in its length (default {default.early_block_tail})",
    )
    p.add_argument(
        "--feature-clamps",
        choices=("fit", "none"),
        default="fit" if default.clamp_features else "none",
        help="hold each answer-level feature to the range it spans on the fitting answers "
        "('fit', the default: a statistic fitted on short answers then ranks long ones "
        "instead of extrapolating their sums and counts) or not ('none': as fits before)",
    )
    p.add_argument(
        "--alternatives",
        type=integer(1),
        default=None,
        help=f"alternatives per token the features read (default {DEFAULT_ALTERNATIVES}, or "
        "all the traces carry when fewer)",
    )
    p.add_argument(
        "--range-quantile",
        type=float,
        default=default.range_quantile,
        help="clamp each per-token feature to these quantiles of the fitting tokens",
    )
    p.add_argument("--on-length", default=default.on_length, choices=("answer", "block"))
    p.add_argument("--context", metavar="FILE", default=None, help="generation context JSON")
    p.add_argument(
        "--max-tokens",
        type=integer(1),
        default=None,
        help="token limit of the answers (default: the context's, else the longest "
        "answer in the traces)",
    )
    p.add_argument("--model-id", default=None)
    p.add_argument("--api-model", default=None)
    p.add_argument(
        "--vocab-size",
        type=integer(2),
        default=None,
        metavar="N",
        help="the model's vocabulary size, for traces that do not carry it "
        "(recorded from an API stream)",
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_fit, early_block_given=False)
