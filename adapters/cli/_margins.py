"""The early-block margins of a fitted statistic as ``fit`` and ``calibrate --certificate``
report them: each answer replayed with and without them, and what they cost."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

__all__ = ["early_line", "margins_blocked", "margins_line", "replays"]


def replays(
    stat: Any, traces: list[Any], skeleton: Any, limit: int | None
) -> tuple[list[Any], list[Any]]:
    """Each answer replayed as the monitor streams it, and without the statistic's
    early-block margins (one replay: :func:`guardrail.fitting.with_margins` adds them)."""
    from guardrail.fitting import replay_fitted, with_margins

    bare = replace(stat, block_margins=()) if stat.block_margins else stat
    plain = [replay_fitted(bare, t, skeleton=skeleton, max_tokens=limit) for t in traces]
    return plain, [with_margins(p, stat.block_margins) for p in plain]


def margins_blocked(
    stat: Any, plain: list[Any], correct: Any, policy: Any, tau: float
) -> dict[str, int] | None:
    """:func:`guardrail._fitted_replay.margin_cost` at ``tau`` as the summaries report it (``None``
    for a statistic without margins)."""
    from guardrail._fitted_replay import margin_cost

    if not stat.block_margins:
        return None
    blocked, shown = margin_cost(plain, stat.block_margins, correct, policy, tau)
    return {"blocked": blocked, "shown_without_margins": shown}


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
    return (
        f"  early block      margins for the first {early['positions']} tokens (quantile "
        f"{early['quantile']:g} of a correct answer's later rise{widened})\n"
    )
