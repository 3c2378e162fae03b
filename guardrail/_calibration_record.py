"""The record a calibration leaves in a certificate: the threshold and what audits it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ._errors import ConfigError

__all__ = ["Calibration", "guarantee_text"]


@dataclass(frozen=True)
class Calibration:
    """A calibrated threshold with everything needed to audit it (JSON-serialisable).

    Examples
    --------
        >>> cal = Calibration(method="ltt", tau=2.5, risk=0.3, delta=0.1, score="mean_lift",
        ...                   n=200, n_answered=120, n_errors=30, coverage=0.6,
        ...                   empirical_risk=0.25, risk_upper=0.29)
        >>> Calibration.from_json(cal.to_json()) == cal
        True
    """

    method: str
    tau: float
    risk: float
    delta: float
    score: str
    n: int
    n_answered: int
    n_errors: int
    coverage: float
    empirical_risk: float
    risk_upper: float
    mean_budget: float | None = None
    v: float | None = None
    c: float | None = None
    subgamma_method: str | None = None
    model_check: dict[str, float] | None = None
    pac_bayes_bound: float | None = None
    kappa: float | None = None
    kappa_bound: float | None = None
    start: int | None = None
    n_tested: int | None = None
    seed: int = 0
    policy: dict[str, Any] | None = None
    guarantee: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Calibration:
        try:
            return cls(**data)
        except TypeError as exc:
            raise ConfigError(f"not a calibration record: {exc}") from exc

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Calibration:
        return cls.from_dict(json.loads(text))


def guarantee_text(
    method: str, risk: float, delta: float, procedure: str = "fixed-sequence"
) -> str:
    if method == "ltt" and procedure == "conformal":
        return (
            f"In expectation over the calibration draw (not with probability 1 - delta), "
            f"the rule 'show the answer iff it is certified at tau' makes errors on at most "
            f"{risk:g} of the answers it shows (selective risk), for new questions from the "
            f"calibration distribution; a given calibration can give a rule above {risk:g}, "
            f"offset by others below it. Conformal selection's promise carried to a fixed "
            f"threshold: it holds as the reference scores grow. It bounds how often shown "
            f"answers are wrong, not how wrong they are."
        )
    if method == "ltt":
        return (
            f"With probability at least {1 - delta:g} over the calibration draw, the rule "
            f"'show the answer iff it is certified at tau' makes errors on at most "
            f"{risk:g} of the answers it shows (selective risk), for new questions from "
            f"the calibration distribution. It bounds how often shown answers are wrong, "
            f"not how wrong they are."
        )
    return (
        "Paper Algorithm 1: tau is a lower confidence bound on the mean lift. It uses no "
        "labels and gives no guarantee on the selective risk."
    )
