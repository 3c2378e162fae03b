"""The numbers a user checks a certificate with: the budget a skeleton leaves
(:func:`budget`), the clip a skeleton supports (:func:`support_clip`) and the
Clopper-Pearson interval of a labelled share (:func:`clopper_pearson_interval`).

Everything a guarded stream needs at run time is in :mod:`guardrail` itself. The anytime
boundaries, the streaming statistics and their batch twins and the sub-gamma fit are the
library's own, in :mod:`guardrail._boundaries`, :mod:`guardrail._statistics`,
:mod:`guardrail._lift`, :mod:`guardrail._bounds` and :mod:`guardrail._subgamma`.
"""

from __future__ import annotations

from ._bounds import (
    clopper_pearson_interval,
)
from ._lift import budget, support_clip

__all__ = [
    "budget",
    "clopper_pearson_interval",
    "support_clip",
]
