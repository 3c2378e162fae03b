"""The early-block margins of a fitted statistic as ``fit`` and ``calibrate --certificate``
print them. Replaying each answer with and without them and counting what they cost is
the library's (:mod:`guardrail._fit._choice`), named here for ``calibrate --certificate``."""

from __future__ import annotations

from typing import Any

from guardrail._fit._choice import margins_blocked, replays

__all__ = ["early_line", "margins_blocked", "margins_line", "replays"]
# replays and margins_blocked are the library's (fit_certificate replays and records with
# them); calibrate --certificate reports the same numbers through this module


def margins_line(cost: dict[str, int] | None) -> str:
    """The summary's line on what the margins cost (empty without margins)."""
    if cost is None:
        return ""
    return (
        f"  margins blocked  {cost['blocked']} of the {cost['shown_without_margins']} correct "
        "calibration answers the rule shows without them\n"
    )


def early_line(early: Any) -> str:
    """``fit``'s summary line on its early-block margins (none without them)."""
    if not early:
        return ""
    if not early["positions"]:
        return "  early block      none: too few correct fitting answers to set a margin\n"
    share = early.get("share")
    widened = (
        f", widened until {share:g} of the correct answers never rise past them"
        if share is not None
        else ""
    )
    tail = ", falling as c/sqrt(t) past the fitted positions" if early.get("tail") else ""
    return (
        f"  early block      margins for the first {early['positions']} tokens (quantile "
        f"{early['quantile']:g} of a correct answer's later rise{widened}{tail})\n"
    )
