"""The source paper's own procedures, kept to reproduce its numbers
(``paper/selective_risk_certification.tex``; the section or theorem is in each docstring).

Several of them do not deliver the guarantee the paper claims (DESIGN.md marks the
fixes): the ``paper`` boundary rests on sub-gamma parameters estimated from data, and
the paper's calibration threshold bounds the mean lift, not the selective risk.

The public name is :func:`topk_compensated_lift`, the appendix's top-k compensated lift.
The rest is reached through the library, not imported: the ``paper`` boundary
(``StreamPolicy(boundary="paper")``, the sub-gamma law-of-the-iterated-logarithm
boundary of Thm 2.8) and the paper's bounds (Thms 2.5-2.7, Algorithm 1), which
``liftguard`` reports where it uses them, live in :mod:`guardrail._boundaries`,
:mod:`guardrail._statistics` and :mod:`guardrail._bounds`.
"""

from __future__ import annotations

from ._topk import topk_compensated_lift

__all__ = [
    "topk_compensated_lift",
]
