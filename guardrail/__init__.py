"""liftguard core: information lift, anytime-valid boundaries and risk-controlled calibration.

Pure math and small stateful objects; no network, no vendor SDKs. Provider
integrations live in :mod:`adapters`, storage in :mod:`skeleton_store`.

The runtime surface (``__all__``): the :class:`Certificate` and what it holds,
the per-answer monitor and its verdicts, the :class:`RiskMonitor` that watches the
labels of shown answers, skeletons, calibration and the errors.
The math and the diagnostics live in public submodules:

- :mod:`guardrail.stats`: anytime boundaries, the streaming statistics and their
  batch twins, Clopper-Pearson and binomial bounds, the sub-gamma fit;
- :mod:`guardrail.topk`: top-k compensation (entropy, log Z_T, censored tokens);
- :mod:`guardrail.traces`: the trace format, labels, trace scores and baselines;
- :mod:`guardrail.evaluate`: replay, ``shown_at``, Learn-then-Test, AUROC and
  the repeated-split evaluation;
- :mod:`guardrail.fitting`: per-token features, aggregates and the fitted statistic;
- :mod:`guardrail.vsd`: Variational Skeleton Design (PyTorch, imported lazily);
- :mod:`guardrail.paper`: the source paper's own boundary and bounds, to reproduce
  its numbers.

``import guardrail`` imports neither scipy nor torch.
"""

from __future__ import annotations

from ._calibration import Calibration, calibrate, calibrate_policy
from ._certificate import (
    Certificate,
    ContextMismatchWarning,
    GenerationContext,
    ModelIdentity,
    SkeletonSpec,
)
from ._errors import (
    ConfigError,
    GuardrailBlocked,
    GuardrailError,
    InsufficientDataError,
    MissingDependencyError,
    MissingLogprobsError,
    StreamTruncated,
    TraceFormatError,
)
from ._fitted import FittedStatistic
from ._guarded import Guarded, GuardedText
from ._monitor import Monitor
from ._policy import StreamPolicy
from ._reads import Reads, Skeleton, skeleton_reads
from ._risk_monitor import RiskMonitor
from ._rules import EvidenceRule, FittedRule, LiftRule
from ._skeleton_spec import SkeletonResolver
from ._skeletons import (
    NGramSkeleton,
    TemperatureSkeleton,
    TokenIds,
    UniformSkeleton,
    WithTokenIds,
)
from ._vector import VectorSkeleton
from ._verdict import Cause, State, TokenEvent, Verdict, end_cause

__version__ = "0.1.0"

__all__ = [
    "Calibration",
    "Cause",
    "Certificate",
    "ConfigError",
    "ContextMismatchWarning",
    "EvidenceRule",
    "FittedRule",
    "FittedStatistic",
    "GenerationContext",
    "Guarded",
    "GuardedText",
    "GuardrailBlocked",
    "GuardrailError",
    "InsufficientDataError",
    "LiftRule",
    "MissingDependencyError",
    "MissingLogprobsError",
    "ModelIdentity",
    "Monitor",
    "NGramSkeleton",
    "Reads",
    "RiskMonitor",
    "Skeleton",
    "SkeletonResolver",
    "SkeletonSpec",
    "State",
    "StreamPolicy",
    "StreamTruncated",
    "TemperatureSkeleton",
    "TokenEvent",
    "TokenIds",
    "TraceFormatError",
    "UniformSkeleton",
    "VectorSkeleton",
    "Verdict",
    "WithTokenIds",
    "__version__",
    "calibrate",
    "calibrate_policy",
    "end_cause",
    "skeleton_reads",
]
