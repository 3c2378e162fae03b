"""liftguard core: information lift, anytime-valid boundaries and risk-controlled calibration.

Pure math and small stateful objects; no network, no vendor SDKs. Provider
integrations live in :mod:`adapters`, storage in :mod:`skeleton_store`.

The runtime surface (``__all__``): the :class:`Certificate` and what it holds,
the per-answer monitor and its verdicts, the :class:`RiskMonitor` that watches the
labels of shown answers, skeletons, calibration and the errors.
What a user calls beyond that lives in public submodules:

- :mod:`guardrail.fitting`: :func:`~guardrail.fitting.fit_certificate`, the whole
  recipe from labelled traces to a certificate, and the fitted statistic's parts;
- :mod:`guardrail.traces`: reading traces, labels, trace scores and baselines;
- :mod:`guardrail.evaluate`: Learn-then-Test, conformal selection, AUROC and the
  repeated-split evaluation;
- :mod:`guardrail.stats`: a skeleton's budget and clip, Clopper-Pearson intervals;
- :mod:`guardrail.topk`: top-k compensation (entropy, log Z_T, censored tokens);
- :mod:`guardrail.vsd`: Variational Skeleton Design (PyTorch, imported lazily);
- :mod:`guardrail.paper`: the source paper's top-k compensated lift.

The rest (the boundaries, the streaming statistics, replay) is the library's own, in
the private modules beside these.

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
    MissingLogprobsError,
    StreamTruncated,
)
from ._gate import Gate, TextGate
from ._monitor import Monitor
from ._policy import StreamPolicy
from ._risk_monitor import RiskMonitor
from ._rules import FittedRule, LiftRule
from ._skeletons import NGramSkeleton, TemperatureSkeleton, UniformSkeleton
from ._vector import VectorSkeleton
from ._verdict import Cause, State, TokenEvent, Verdict

__version__ = "0.1.0"

__all__ = [
    "Calibration",
    "Cause",
    "Certificate",
    "ConfigError",
    "ContextMismatchWarning",
    "FittedRule",
    "Gate",
    "GenerationContext",
    "GuardrailBlocked",
    "GuardrailError",
    "InsufficientDataError",
    "LiftRule",
    "MissingLogprobsError",
    "ModelIdentity",
    "Monitor",
    "NGramSkeleton",
    "RiskMonitor",
    "SkeletonSpec",
    "State",
    "StreamPolicy",
    "StreamTruncated",
    "TemperatureSkeleton",
    "TextGate",
    "TokenEvent",
    "UniformSkeleton",
    "VectorSkeleton",
    "Verdict",
    "__version__",
    "calibrate",
    "calibrate_policy",
]
