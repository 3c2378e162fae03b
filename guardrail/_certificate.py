"""The rule that is deployed, as one value: a :class:`Certificate`.

A certificate holds everything a guarded stream needs and everything an
auditor needs to check it: the streaming policy (statistic, boundary,
missing-logprob and cut-off handling), the threshold ``tau``, the skeleton as a
spec, the identity of the model it was calibrated for, the **generation
context** of the calibration answers (system prompt, decoding settings, token
limit, stops) and the calibration record (risk, delta, sizes, coverage, the
Clopper-Pearson bound, the traces' hash and the command that made it).

Its guarantee holds only for answers generated the way the calibration's were:
adapters that make the request apply :attr:`Certificate.context` and warn
(:class:`ContextMismatchWarning`) when a caller changes a setting that moves the
answer distribution. ``certificate.monitor()`` gives a fresh per-answer
:class:`~guardrail.Monitor` of the lift rule (:class:`~guardrail.LiftRule`), or for a
certificate with a fitted ``statistic`` (:class:`~guardrail._fit._statistic.FittedStatistic`, stored
in the JSON as weights, feature names and normalisation) of the fitted rule
(:class:`~guardrail.FittedRule`). A fitted certificate's ``tau`` is on the
statistic's scale (log-odds of a correct answer), and its token limit
``context.max_tokens`` bounds the continuations its early verdicts consider.

The skeleton is stored as a :class:`~guardrail.SkeletonSpec`. Parametric kinds
(``uniform``, ``temperature``) are built from it for every answer; the others
(a stored vector or n-gram, the prompt-free model) are built once by a resolver,
``Certificate.load(path, resolver=...)`` or :meth:`Certificate.resolve`, which
binds the object (:attr:`Certificate.bound_skeleton`); a skeleton passed to
:meth:`Certificate.monitor` overrides both.

The JSON form (``to_dict`` / ``from_dict`` / ``save`` / ``load``) round-trips
exactly; unknown or invalid fields are a :class:`~guardrail.ConfigError` naming
the field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from ._calibration import Calibration
from ._certificate_parts import (
    ContextMismatchWarning,
    GenerationContext,
    ModelIdentity,
    SkeletonSpec,
    _check_fields,
)
from ._errors import ConfigError
from ._fit._statistic import FittedStatistic
from ._monitor import Monitor
from ._policy import OnMissing, StreamPolicy
from ._reads import Reads, Skeleton
from ._risk_monitor import RiskMonitor
from ._rules import EvidenceRule, FittedRule, LiftRule
from ._skeleton_spec import Resolvers

__all__ = [
    "FORMAT",
    "Certificate",
    "ContextMismatchWarning",
    "GenerationContext",
    "ModelIdentity",
    "SkeletonSpec",
]

FORMAT = "liftguard.certificate/1"
"""The ``format`` field of a certificate file."""


@dataclass(frozen=True)
class Certificate:
    """The deployed rule: policy, threshold, skeleton, model, generation context and
    the calibration that backs it (frozen; validated on construction).

    ``calibration`` is ``None`` for a hand-made rule, which carries no
    guarantee. ``provenance`` records where it came from (``traces``,
    ``traces_sha256``, ``traces_digest``, ``command``, ``fit``: the data a fitted
    statistic used, ...).
    ``statistic``: a fitted statistic that replaces the policy's lift statistic (the
    policy then contributes its missing-logprob, cut-off, ``early``, ``min_tokens``
    and ``final_rule`` settings); ``tau`` is then on its scale, any finite number.

    Examples
    --------
        >>> cert = Certificate(StreamPolicy(), tau=2.0,
        ...                    skeleton=SkeletonSpec("uniform", {"vocab_size": 1000}),
        ...                    model=ModelIdentity("my-model"))
        >>> monitor = cert.monitor()
        >>> monitor.update(TokenEvent("Paris", logprob=-0.1)).state.value
        'continue'
        >>> monitor.finish().state.value
        'certified'
    """

    policy: StreamPolicy
    tau: float
    skeleton: SkeletonSpec
    model: ModelIdentity
    context: GenerationContext = field(default_factory=GenerationContext)
    calibration: Calibration | None = None
    provenance: Mapping[str, object] = field(default_factory=dict)
    statistic: FittedStatistic | None = None
    bound_skeleton: Skeleton | None = field(default=None, compare=False, repr=False)
    """A skeleton object that comes with the certificate (e.g. the vector of the store
    version that holds it): used by :meth:`monitor`; not part of the JSON form."""

    def __post_init__(self) -> None:
        if self.bound_skeleton is not None and not isinstance(self.bound_skeleton, Skeleton):
            raise ConfigError("bound_skeleton: expected an object with log_prob(event)")
        for name, kind in (
            ("policy", StreamPolicy),
            ("skeleton", SkeletonSpec),
            ("model", ModelIdentity),
            ("context", GenerationContext),
        ):
            if not isinstance(getattr(self, name), kind):
                raise ConfigError(f"{name}: expected a {kind.__name__}")
        if self.calibration is not None and not isinstance(self.calibration, Calibration):
            raise ConfigError("calibration: expected a Calibration or None")
        tau, clip, stat = self.tau, self.policy.clip, self.statistic
        if stat is not None and not isinstance(stat, FittedStatistic):
            raise ConfigError("statistic: expected a FittedStatistic or None")
        number = not isinstance(tau, bool) and isinstance(tau, int | float)
        if stat is not None:
            if not (number and math.isfinite(tau)):
                raise ConfigError(f"tau: must be a finite number (log-odds), got {tau!r}")
            vocab = self.model.vocab_size
            if vocab is not None and vocab != stat.vocab_size:
                raise ConfigError(
                    f"statistic.vocab_size: {stat.vocab_size} differs from the model's {vocab}"
                )
        elif not (number and 0.0 < tau < clip):
            raise ConfigError(f"tau: must lie strictly inside (0, {clip}), got {tau!r}")
        object.__setattr__(self, "tau", float(tau))
        if self.calibration is not None and self.calibration.tau != self.tau:
            raise ConfigError(
                f"tau: {self.tau!r} differs from the calibration's {self.calibration.tau!r}"
            )
        if not isinstance(self.provenance, Mapping):
            raise ConfigError("provenance: expected an object")
        object.__setattr__(self, "provenance", dict(self.provenance))

    @property
    def calibrated(self) -> bool:
        """A calibration backs ``tau`` (else the rule carries no risk guarantee)."""
        return self.calibration is not None

    def monitor(
        self,
        *,
        skeleton: Skeleton | None = None,
        track_bounds: bool = False,
        on_missing_logprobs: OnMissing | None = None,
        exact_entropy: bool = False,
        max_tokens: int | Literal["context"] | None = "context",
    ) -> Monitor:
        """A fresh monitor for one answer. The skeleton: ``skeleton``, else the bound one
        (:meth:`resolve`), else the spec's parametric kind; a ConfigError saying what to
        pass for any other kind. A skeleton with per-answer state gets a stream of its
        own (``for_stream()``).
        ``on_missing_logprobs`` overrides the policy's.

        With a fitted :attr:`statistic`: a monitor of :class:`~guardrail.FittedRule`
        (``track_bounds`` does not apply: it always bounds the score). A ConfigError
        now, not mid-stream, when the caller cannot supply what the statistic reads: a
        skeleton for its lifts, or (``exact_entropy=True``: the caller's events carry
        ``TokenEvent.entropy``) the exact entropies of group ``local``.

        ``max_tokens``: the most tokens the stream can carry, which a fitted rule's early
        verdicts assume (see :class:`~guardrail.FittedRule`): by default
        the context's ``max_tokens`` (right when the request is held to it); pass the
        request's own limit when it allows more, or ``None`` when it is unknown (no
        early verdict then relies on a limit). A lift monitor's verdicts assume none."""
        if (
            max_tokens != "context"
            and max_tokens is not None
            and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1)
        ):
            raise ConfigError(
                f"max_tokens must be an integer >= 1, None or 'context', got {max_tokens!r}"
            )
        stat = self.statistic
        if stat is None:
            rule: EvidenceRule = LiftRule(
                self.policy, self.tau, skeleton=self._skeleton(skeleton), track_bounds=track_bounds
            )
            return Monitor(rule, self.policy, on_missing_logprobs=on_missing_logprobs)
        if "exact_entropy" in stat.requires and not exact_entropy:
            raise ConfigError(
                "this certificate's statistic reads exact entropies (group "
                f"{stat.group!r}), which only a local model's stream supplies: feed them as "
                "TokenEvent.entropy and ask for monitor(exact_entropy=True)"
            )
        fitted_skel = self._skeleton(skeleton) if "skeleton" in stat.requires else None
        limit = self.context.max_tokens if max_tokens == "context" else max_tokens
        rule = FittedRule(stat, self.policy, self.tau, skeleton=fitted_skel, max_tokens=limit)
        return Monitor(rule, self.policy, on_missing_logprobs=on_missing_logprobs)

    def risk_monitor(self, alpha: float = 0.05) -> RiskMonitor:
        """A fresh :class:`~guardrail.RiskMonitor` of this certificate's promise: target the
        calibration's risk level, expected coverage the one-sided ``1 - delta``
        Clopper-Pearson lower bound on the calibration's coverage (so that sampling error
        in the calibration set alone does not raise the coverage warning; none when that
        bound is 0). A ConfigError for an uncalibrated certificate (it promises nothing)."""
        cal = self.calibration
        if cal is None:
            raise ConfigError(
                "the certificate holds no calibration, so it promises no risk to monitor: "
                "calibrate it first ('liftguard calibrate')"
            )
        from ._bounds import clopper_pearson_interval

        low = 0.0
        if 0 < cal.n_answered <= cal.n:
            low = clopper_pearson_interval(cal.n_answered, cal.n, 2.0 * cal.delta)[0]
        return RiskMonitor(cal.risk, alpha, coverage=low if 0.0 < low < 1.0 else None)

    @property
    def reads(self) -> Reads:
        """What the certificate's rule reads of each token besides its logprob, as far as
        the certificate alone says (a lift rule's skeleton says more once built:
        ``monitor().reads``)."""
        return Reads(skeleton=True) if self.statistic is None else self.statistic.reads

    def replay_skeleton(self) -> Skeleton | str | None:
        """The ``skeleton`` that :func:`guardrail.fitting.replay_fitted` takes to replay this
        certificate's fitted statistic on recorded traces: ``None`` where the statistic reads
        no skeleton (or there is none), ``"prompt-free"`` for the prompt-free kind (the
        traces' recorded prompt-free log-probabilities), else the one its spec builds."""
        if self.statistic is None or "skeleton" not in self.statistic.requires:
            return None
        return "prompt-free" if self.skeleton.kind == "prompt_free" else self.skeleton.build()

    def _skeleton(self, skeleton: Skeleton | None) -> Skeleton:
        skel = skeleton if skeleton is not None else self.bound_skeleton
        if skel is None:
            skel = self.skeleton.build()
        for_stream = getattr(skel, "for_stream", None)
        if callable(for_stream):
            fresh = for_stream()
            if not isinstance(fresh, Skeleton):
                raise ConfigError(f"{type(skel).__name__}.for_stream() gave no skeleton")
            skel = fresh
        return skel

    def with_skeleton(self, skeleton: Skeleton | None) -> Certificate:
        """The same certificate with ``skeleton`` bound to it (see :attr:`bound_skeleton`)."""
        return replace(self, bound_skeleton=skeleton)

    def resolve(self, resolver: Resolvers = None) -> Certificate:
        """The certificate with its skeleton built from the spec and bound, so that
        :meth:`monitor` needs nothing more: ``resolver`` (one or several, see
        :class:`~guardrail._skeleton_spec.SkeletonResolver`) builds data and model kinds, e.g.
        ``skeleton_store.resolve_skeleton`` or ``adapters.PromptFreeSkeleton.resolve``.
        Unchanged when a skeleton is bound already or the kind is parametric (built for
        every answer). A ConfigError naming the field when the spec cannot be built
        (a tampered hash, missing data, no resolver for the kind)."""
        if self.bound_skeleton is not None or self.skeleton.builds_alone:
            return self
        return self.with_skeleton(self.skeleton.build(resolver))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``format``, then every field but :attr:`bound_skeleton`;
        ``statistic`` only when there is one)."""
        out = {
            "format": FORMAT,
            "policy": self.policy.to_dict(),
            "tau": self.tau,
            "skeleton": self.skeleton.to_dict(),
            "model": _as_dict(self.model),
            "context": {**_as_dict(self.context), "stop": list(self.context.stop)},
            "calibration": None if self.calibration is None else self.calibration.to_dict(),
            "provenance": dict(self.provenance),
        }
        if self.statistic is not None:
            out["statistic"] = self.statistic.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Any) -> Certificate:
        """The certificate of :meth:`to_dict`; a ConfigError naming any bad field."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"a certificate is a JSON object, got {type(data).__name__}")
        if data.get("format") != FORMAT:
            hint = (
                " (this looks like a calibration record: make a certificate with "
                "'liftguard calibrate ... --out CERT.json')"
                if "method" in data and "risk" in data
                else ""
            )
            raise ConfigError(f"format: expected {FORMAT!r}, got {data.get('format')!r}{hint}")
        body = {k: v for k, v in data.items() if k != "format"}
        out = _check_fields(cls, body, "certificate")
        if "bound_skeleton" in out:  # a runtime object, never read from JSON
            raise ConfigError("certificate: unknown field(s) 'bound_skeleton'")
        for key in ("policy", "tau", "skeleton", "model"):
            if key not in out:
                raise ConfigError(f"{key}: missing")
        cal = out.get("calibration")
        if cal is not None and not isinstance(cal, Mapping):
            raise ConfigError("calibration: expected an object or null")
        stat = out.get("statistic")
        return cls(
            policy=_policy(out["policy"]),
            tau=out["tau"],
            skeleton=SkeletonSpec.from_dict(out["skeleton"]),
            model=ModelIdentity.from_dict(out["model"]),
            context=GenerationContext.from_dict(out.get("context", {})),
            calibration=None if cal is None else _calibration(cal),
            provenance=out.get("provenance", {}),
            statistic=None if stat is None else FittedStatistic.from_dict(stat),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Certificate:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"not valid JSON ({exc})") from exc
        return cls.from_dict(data)

    def save(self, path: str | Path) -> None:
        """Write the JSON form to ``path`` (temporary file + rename: never half-written)."""
        target = Path(path)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(self.to_json(), encoding="utf-8")
        tmp.replace(target)

    @classmethod
    def load(cls, path: str | Path, *, resolver: Resolvers = None) -> Certificate:
        """Read a certificate file; errors name the file. With ``resolver``, a skeleton
        that is not built from its spec alone is built now and bound (:meth:`resolve`)."""
        text = Path(path).read_text(encoding="utf-8-sig")
        try:
            cert = cls.from_json(text)
            return cert if resolver is None else cert.resolve(resolver)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from exc


def _as_dict(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def _policy(data: Any) -> StreamPolicy:
    try:
        return StreamPolicy.from_dict(dict(data) if isinstance(data, Mapping) else data)
    except ConfigError as exc:
        raise ConfigError(f"policy: {exc}") from exc
    except TypeError as exc:
        raise ConfigError(f"policy: {exc}") from exc


def _calibration(data: Mapping[str, Any]) -> Calibration:
    _check_fields(Calibration, data, "calibration")
    return Calibration.from_dict(dict(data))
