"""What :func:`~guardrail.fitting.fit_certificate` is told (:class:`FitOptions`, each default
``liftguard fit``'s) and what it measured beside the certificate (:class:`FitReport`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .._aggregates import Feature
from .._calibration import PROCEDURES, Procedure
from .._errors import ConfigError
from ._choice import EARLY_BLOCK_CHOICES
from ._replay import MARGIN_TAILS, MarginTail
from ._statistic import DEFAULT_L2, Form, moves_one_way

__all__ = ["FitOptions", "FitReport"]


@dataclass(frozen=True, kw_only=True)
class FitOptions:
    """How :func:`fit_certificate` fits and calibrates (each default is ``liftguard
    fit``'s).

    Examples
    --------
        >>> FitOptions().risk, FitOptions().early_block, FitOptions(risk=0.3).group
        (0.8, 0.99, 'lift')
    """

    risk: float = 0.8
    """Target selective risk (that of the shipped SmolLM2 certificate: at most 80% of the
    answers shown wrong, for a model as weak as the bundled 135M one)."""
    delta: float = 0.05
    """Probability that the calibration's guarantee fails."""
    procedure: Procedure = "fixed-sequence"
    """How tau is calibrated (:data:`guardrail._calibration.PROCEDURES`): the default keeps
    the high-probability promise; ``"conformal"`` a cheaper one in expectation."""
    group: Literal["api", "local", "lift"] = "lift"
    """The preset by what a stream supplies: ``api`` (logprobs + alternatives), ``local``
    (+ exact entropies), ``lift`` (+ the skeleton's log-probability)."""
    features: tuple[Feature, ...] | None = None
    """The features, instead of ``group``'s preset (then read as given: no scopes)."""
    scopes: tuple[str, ...] | None = None
    """Scopes whose log-likelihood (``scope:logprob.sum``) is added to the preset;
    ``None``: each scope at least a tenth of the fitting answers have tokens in."""
    form: Form = "answer"
    """``answer``: any features, exact early verdicts from bounds; ``monotone``: features
    that move one way only, blocks as soon as the score falls below tau."""
    skeleton: str = "prompt-free"
    """The trace skeleton of the lift features (one of
    :data:`~guardrail._scores.TRACE_SKELETONS`)."""
    fit_fraction: float = 0.5
    """Share of the traces the statistic is fitted on; tau is calibrated on the rest. 1:
    fit on all of them, leaving tau to a later calibration (the certificate certifies
    nothing until then)."""
    seed: int = 0
    """Seed of the split (and of the calibration and selection)."""
    l2: float = DEFAULT_L2
    """L2 penalty of the fit."""
    select: Literal["none", "coverage"] = "none"
    """``coverage``: choose the statistic by cross-validated coverage at ``risk`` on the
    fitting answers (:mod:`guardrail._fit._choice`); ``none``: the features as given."""
    early_block: float | None = 0.99
    """Also block as soon as the score so far plus a margin is below tau: per position,
    this quantile of how far a correct fitting answer's score still rose from there
    (``None``: only the exact early blocks)."""
    early_block_choices: tuple[float | None, ...] = EARLY_BLOCK_CHOICES
    """The quantiles ``select="coverage"`` tries, in place of ``early_block``."""
    early_block_share: float | None = 0.9
    """Widen the margins by one factor until this share of the correct fitting answers
    never rises past them at any position (``None``: the per-position quantile alone). Of
    0.9, 0.95 and 0.99 (and none), the one that, cross-validated on the fitting halves of
    the MBPP and GSM8K traces with the default features, covered the most at risks 0.3
    and 0.4 while a blocked answer stayed read for at most half its tokens at risks 0.2
    and 0.3 (``studies/scope_sums.py``); on TriviaQA's short answers it changes
    nothing measurable."""
    early_block_tail: MarginTail = "sqrt"
    """How the margins run past the positions the correct fitting answers reach (at least
    20 of them), up to the token limit: ``"sqrt"``, falling as ``c / sqrt(t)`` (at most
    the flat one), so that margins fitted on short answers block a longer answer about as
    early in its length; ``"flat"``, the largest margin of the last half of the fitted
    positions (:func:`~guardrail.fitting.margins_from_scores`). ``"sqrt"`` is the default
    because, fitted on MBPP and run on GSM8K's answers ten times as long, it cut what a
    blocked answer shows before its block from 56% to 46% at risk 0.2 and from 71% to 61%
    at 0.3 while leaving the in-domain cells as they were (``python -m studies.shift``,
    ``python -m studies.margin_rules``)."""
    clamp_features: bool = True
    """Hold each answer-level feature to the range it spans on the fitting answers
    (:attr:`~guardrail.fitting.FittedStatistic.clamps`). The default, because without it
    a statistic fitted on the same model's two-token TriviaQA answers ranked its MBPP and
    GSM8K answers at chance (AUROC 0.535 and 0.481, against 0.746 and 0.751 for the
    summed log-probability), its sums and counts extrapolated a hundredfold; with it,
    0.751 and 0.764. In-domain it changes the AUROC by at most 0.001; its coverage under
    the other shifts is mixed (``python -m studies.shift``, ``docs/results/shift.md``)."""
    alternatives: int | None = None
    """Alternatives per token the features read (default 5, or all the traces carry when
    fewer)."""
    range_quantile: float = 0.01
    """Clamp each per-token feature to these quantiles of the fitting tokens."""
    on_length: Literal["answer", "block"] = "answer"
    """What an answer cut at the token limit gets."""
    max_tokens: int | None = None
    """Token limit of the answers (default: the context's, else the longest answer)."""
    model_id: str | None = None
    """The certificate's model name (default: the traces')."""
    api_model: str | None = None
    """The name requests use, where it differs."""

    def __post_init__(self) -> None:
        if self.procedure not in PROCEDURES:
            raise ConfigError(f"procedure must be one of {', '.join(PROCEDURES)}, "
                              f"got {self.procedure!r}")  # fmt: skip
        if self.early_block_tail not in MARGIN_TAILS:
            raise ConfigError(f"early_block_tail must be one of {', '.join(MARGIN_TAILS)}, "
                              f"got {self.early_block_tail!r}")  # fmt: skip
        if not 0.0 <= self.range_quantile < 0.5:
            raise ConfigError("range_quantile must lie in [0, 0.5)")
        if not 0.0 < self.fit_fraction <= 1.0:
            raise ConfigError(f"fit_fraction must lie in (0, 1], got {self.fit_fraction!r}")
        if self.features is not None and self.scopes is not None:
            raise ConfigError("scopes add to the group's preset; name scoped features instead")
        if self.features is not None:
            if len(set(self.features)) != len(self.features):
                raise ConfigError("features: a feature is named twice")
            both = [f.name for f in self.features if not moves_one_way(f)]
            if self.form == "monotone" and both:
                raise ConfigError(
                    f"features with form monotone: {', '.join(both)} can move either way as "
                    "tokens arrive"
                )


@dataclass(frozen=True)
class FitReport:
    """What :func:`fit_certificate` measured beside the certificate it returns (the
    calibration's numbers are the certificate's ``calibration``).

    Examples
    --------
        >>> report = FitReport(scopes=("code",), n_fit=200, n_calibration=200,
        ...                    n_calibration_correct=101, max_tokens=512, calibrated=True,
        ...                    calibration_auroc=0.78, tokens_read_fraction=0.78,
        ...                    margins_blocked=None, certifies_nothing=False)
        >>> report.calibrated and not report.certifies_nothing
        True
    """

    scopes: tuple[str, ...]
    """The scopes whose log-likelihood the statistic reads."""
    n_fit: int
    n_calibration: int
    n_calibration_correct: int
    max_tokens: int
    """The token limit the certificate's context records."""
    calibrated: bool
    """Whether tau was calibrated here (``fit_fraction < 1``)."""
    calibration_auroc: float | None
    tokens_read_fraction: float
    """Mean share of a calibration answer read before its verdict."""
    margins_blocked: dict[str, int] | None
    """Correct calibration answers the early-block margins block (``blocked``), of those
    the rule shows without them (``shown_without_margins``)."""
    certifies_nothing: bool
    """No threshold passed (or none was calibrated): tau is above every reachable score."""
    refusal: str = ""
    """Why the calibration passed no threshold (empty otherwise)."""
    selection: list[dict[str, Any]] | None = None
    """Each candidate's cross-validated measurements (``select="coverage"``)."""
    early_block: dict[str, Any] | None = None
    """The early-block margins' quantile, widening and positions."""
    in_expectation_coverage: float | None = None
    """The share of the calibration answers the promise in expectation would show at the
    same risk (:func:`guardrail._calibration.expectation_coverage`), beside a
    high-probability calibration; ``None`` under ``procedure="conformal"``, without
    calibration answers, or where it shows none."""
    notes: tuple[str, ...] = field(default=())
    """What the caller should know (the token limit or alternatives taken from the traces,
    a skeleton that will not match); also the certificate's ``provenance["note"]``."""
