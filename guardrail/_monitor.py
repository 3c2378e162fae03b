"""The streaming certificate monitor: one answer, one token at a time.

:class:`CertificateMonitor` applies exactly the rule of :func:`guardrail.replay`
(same arithmetic, same order) in O(1) pure-Python time and memory per token,
so calibration covers what is deployed. ``update*`` returns CONTINUE until an
early verdict (CERTIFIED/BLOCKED, ``final=True``); :meth:`~CertificateMonitor.finish`
applies the final rule. Once decided, ``update*`` returns the same verdict
without reading its input (an adapter may keep streaming in passthrough mode);
after ``finish()`` any ``update*`` raises :class:`GuardrailError`. Every call
returns a fresh :class:`Verdict`, built by :func:`_verdict`, which skips the
frozen-dataclass ``__init__`` (about half the per-token cost; see
``benchmarks/bench_monitor.py``).

Bounds on the mean lift (nats): ``paper``: ``mean -/+ r_t`` clamped to ``[0, B]``.
``betting``: ``[0, B]``, narrowed to ``tau`` on the decided side once decided;
``track_bounds=True`` adds the running-intersection inversion of the wealth
processes on a 49-point grid (as :func:`betting_confidence_sequence`, conservative
to the grid; several times the per-token cost). It is a confidence sequence for
a mean shared by all tokens (e.g. i.i.d.), not for the running empirical mean,
which a drifting stream can leave; if it would become empty it stays one grid
cell wide. :class:`GuardedText` turns verdicts into what may be shown.
"""

from __future__ import annotations

import math
from bisect import insort
from math import log, log1p, sqrt
from typing import Literal, Protocol, runtime_checkable

from ._errors import ConfigError, GuardrailError, MissingLogprobsError
from ._policy import StreamPolicy
from ._verdict import Cause, State, TokenEvent, Verdict, end_cause
from ._verdict import make_verdict as _verdict

__all__ = [
    "CertificateMonitor",
    "GuardedText",
    "Skeleton",
    "State",
    "TokenEvent",
    "UniformSkeleton",
    "Verdict",
]

MissingPolicy = Literal["block", "pass", "error"]
StreamMode = Literal["passthrough", "buffered", "final"]
CENSORED_LOGPROB = -9999.0
"""OpenAI's sentinel for a sampled token outside the top 20; any value <= it is unusable."""
_GRID_SIZE = 49


@runtime_checkable
class Skeleton(Protocol):
    """A skeleton baseline ``S``: the log-probability it gives the emitted token."""

    def log_prob(self, event: TokenEvent) -> float: ...


class UniformSkeleton:
    """``S = 1/|V|`` for every token: the lift is ``log P + log |V|``."""

    __slots__ = ("_log_prob", "vocab_size")

    needs_top_logprobs = False
    """Scores need only the emitted token: stream adapters skip the alternatives."""

    def __init__(self, vocab_size: int) -> None:
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
            raise ConfigError(f"vocab_size must be an integer >= 1, got {vocab_size!r}")
        self.vocab_size, self._log_prob = vocab_size, -math.log(vocab_size)

    def log_prob(self, event: TokenEvent) -> float:
        return self._log_prob


_CONTINUE = State.CONTINUE
_UNDECIDED = Cause.UNDECIDED
_END_REASONS = {
    Cause.TRUNCATED: "the stream ended without a finish after {t} tokens (cut off; "
    "an answer not fully seen is never certified)",
    Cause.LENGTH: "the answer was cut at the token limit after {t} tokens "
    "(finish_reason 'length'; the policy counts only complete answers: on_length='block')",
    Cause.CONTENT_FILTER: "the provider's content filter stopped the answer after {t} tokens",
    Cause.REFUSAL: "the model refused (finish_reason {reason!r})",
    Cause.OTHER_FINISH: "the stream finished with {reason!r}, not a complete text answer",
}


def _describe(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "missing" if value is None else "non-finite"
    return "censored (outside the top-k)" if value <= CENSORED_LOGPROB else "positive (> 0)"


class CertificateMonitor:
    """Certify or block one streamed answer at threshold ``tau`` under ``policy``.

    ``update(event)`` needs a ``skeleton``; ``update_lift(x)`` takes a clipped lift
    in ``[0, clip]``. Unusable logprobs (None, NaN, +/-inf, <= -9999, > 0) and
    NaN/inf lifts follow ``on_missing_logprobs``: ``"block"`` (final BLOCKED),
    ``"pass"`` (skipped, ``t`` unchanged) or ``"error"`` (MissingLogprobsError).
    Token positions are 0-based and count every event, skipped ones included.
    """

    __slots__ = (
        "_b", "_bets", "_boundary", "_c", "_c2", "_cap_down", "_cap_up", "_closed", "_down",
        "_early", "_events", "_finished", "_grid", "_hi", "_k", "_lo", "_low", "_lvl0", "_m",
        "_min", "_min_agg", "_min_tokens",
        "_on_missing", "_paper", "_policy", "_reason_cont", "_reason_wait", "_s2", "_skeleton",
        "_sq", "_t", "_tau", "_thr", "_total", "_total_s", "_track", "_up", "_v2", "_verdict",
    )  # fmt: skip

    def __init__(
        self,
        policy: StreamPolicy,
        tau: float,
        *,
        skeleton: Skeleton | None = None,
        on_missing_logprobs: MissingPolicy = "block",
        track_bounds: bool = False,
    ) -> None:
        if not isinstance(policy, StreamPolicy):
            raise ConfigError(f"policy must be a StreamPolicy, got {type(policy).__name__}")
        b = policy.clip
        if isinstance(tau, bool) or not isinstance(tau, int | float) or not (0.0 < tau < b):
            raise ConfigError(f"tau must lie strictly inside (0, {b}), got {tau!r}")
        if on_missing_logprobs not in ("block", "pass", "error"):
            raise ConfigError(
                f"on_missing_logprobs must be block/pass/error: {on_missing_logprobs!r}"
            )
        if skeleton is not None and not isinstance(skeleton, Skeleton):
            raise ConfigError(f"skeleton must have a log_prob(event) method, got {skeleton!r}")
        self._policy, self._tau, self._b = policy, float(tau), b
        self._skeleton, self._on_missing = skeleton, on_missing_logprobs
        self._boundary, self._paper = policy.boundary, policy.boundary == "paper"
        self._min_tokens, self._early = policy.min_tokens, policy.early
        # the same constants, computed the same way, as replay() and betting_log_wealth()
        self._m = m = self._tau / b
        self._thr = thr = math.log(2.0 / policy.delta)
        self._c2 = 2.0 * thr
        self._cap_up, self._cap_down = policy.bet_cap / m, policy.bet_cap / (1.0 - m)
        self._v2, self._c = 2.0 * (policy.v or 0.0), policy.c or 0.0
        self._lvl0 = math.log(1.0 / (policy.delta / 2.0))
        self._min_agg = policy.order_based
        if self._min_agg:
            self._paper = False
        self._k = k = policy.n_lowest
        self._min = b  # the order-based statistic: min, or mean of the k lowest lifts
        self._low = [b] * k  # the k lowest lifts so far, ascending (missing ones = clip)
        self._track = track_bounds and not self._paper and not self._min_agg
        self._bets = not self._paper and not self._min_agg and (self._early or self._track)
        self._t = self._events = self._lo = 0
        self._total = self._total_s = self._sq = self._up = self._down = 0.0
        self._s2, self._hi, self._closed, self._finished = 0.25, _GRID_SIZE, False, False
        self._grid: list[list[float]] | None = None
        if self._track:
            step = 1.0 / (_GRID_SIZE + 1)  # = np.linspace(0, 1, G + 2)[1:-1], bit for bit
            g = [(i + 1) * step for i in range(_GRID_SIZE)]
            caps = policy.bet_cap
            self._grid = [g, [0.0] * _GRID_SIZE, [0.0] * _GRID_SIZE]
            self._grid += [[caps / v for v in g], [caps / (1.0 - v) for v in g]]
        self._reason_wait = f"continue: fewer than min_tokens={self._min_tokens} tokens"
        wait = "evidence not yet conclusive" if self._early else "verdict at end (early=False)"
        self._reason_cont = f"continue: {wait}"
        why, tau = "continue: no tokens yet", self._tau
        self._verdict = _verdict(
            _CONTINUE, 0, 0.0, 0.0, b, tau, policy.boundary, why, False, _UNDECIDED
        )

    @property
    def policy(self) -> StreamPolicy:
        return self._policy

    @property
    def tau(self) -> float:
        return self._tau

    @property
    def skeleton(self) -> Skeleton | None:
        return self._skeleton

    @property
    def verdict(self) -> Verdict:
        return self._verdict

    @property
    def t(self) -> int:
        return self._t

    @property
    def mean(self) -> float:
        return self._total / self._t if self._t else 0.0

    @property
    def minimum(self) -> float:
        """Smallest clipped lift so far (``clip`` before the first token); tracked
        for ``aggregate="min"`` and ``"lowest"`` policies, ``nan`` otherwise."""
        return self._low[0] if self._min_agg else math.nan

    @property
    def statistic(self) -> float:
        """The aggregate the final rule compares with ``tau``: the running mean,
        minimum, or mean of the ``lowest_k`` weakest lifts (``clip`` before any token)."""
        if self._min_agg:
            return self._min
        return self._total / self._t if self._t else self._b

    def update_lift(self, x: float) -> Verdict:
        """Add one clipped lift in ``[0, clip]`` (a finite value outside is a ConfigError)."""
        if self._closed:
            return self._after_final()
        b = self._b
        if not (0.0 <= x <= b):
            if math.isfinite(x):
                raise ConfigError(f"clipped lift must lie in [0, {b}], got {x!r}")
            self._events += 1
            return self._missing(x, "lift")
        self._events += 1
        t = self._t + 1
        self._t = t
        total = self._total + x
        self._total = total
        mean = total / t
        tau = self._tau
        lower, upper = 0.0, b
        if self._bets:  # predictable plug-in bet from the past, then the state update
            xs = x / b
            lam = sqrt(self._c2 / (self._s2 * t * log1p(t)))
            if self._early:
                d = xs - self._m
                cu, cd = self._cap_up, self._cap_down
                self._up += log1p((lam if lam < cu else cu) * d)
                self._down += log1p(-(lam if lam < cd else cd) * d)
            if self._track:
                lower, upper = self._grid_step(xs, lam)
            total_s = self._total_s + xs
            self._total_s = total_s
            dev = xs - (0.5 + total_s) / (t + 1)
            sq = self._sq + dev * dev
            self._sq = sq
            self._s2 = (0.25 + sq) / (t + 1)
        live = self._early and t >= self._min_tokens
        if self._min_agg:
            lows = self._low
            if x < lows[-1]:
                if self._k == 1:
                    lows[0] = x
                    self._min = x
                else:
                    insort(lows, x)
                    lows.pop()
                    self._min = sum(lows) / self._k
            low = self._min
            if live and low < tau:
                what = "token lift" if self._k == 1 else f"mean of the {self._k} lowest lifts"
                agg = self._policy.aggregate
                why = f"blocked: {what} {low:.4g} < tau={tau:g} by token {t} ({agg} aggregate)"
                return self._final(State.BLOCKED, why, lower, upper, Cause.BELOW_THRESHOLD)
        elif self._paper:
            level = log1p(log(t)) + self._lvl0
            r = sqrt(self._v2 * level / t) + self._c * level / t
            lower, upper = mean - r, mean + r
            cert = lower > tau
            lower, upper = (lower if lower > 0.0 else 0.0), (upper if upper < b else b)
            if live and (cert or mean + r < tau):
                return self._decide(cert, t, lower, upper)
        elif live:
            thr = self._thr
            up_hit, down_hit = self._up >= thr, self._down >= thr
            if up_hit and down_hit:  # replay(): simultaneous first crossings -> undecided
                self._early = False
                self._reason_cont = "continue: conflicting evidence; verdict at end of stream"
            elif up_hit:
                return self._decide(True, t, lower if lower > tau else tau, upper)
            elif down_hit:
                return self._decide(False, t, lower, upper if upper < tau else tau)
        why = self._reason_wait if t < self._min_tokens else self._reason_cont
        v = _verdict(_CONTINUE, t, mean, lower, upper, tau, self._boundary, why, False, _UNDECIDED)
        self._verdict = v
        return v

    def update(self, event: TokenEvent) -> Verdict:
        """Add one token: lift ``clip(event.logprob - skeleton.log_prob(event))``."""
        skel = self._skeleton
        if skel is None:
            raise ConfigError(
                "update(event) needs a skeleton: pass skeleton=... to CertificateMonitor, "
                "or feed clipped lifts with update_lift()"
            )
        if self._closed:
            return self._after_final()
        idx = event.index
        if idx is not None and idx != self._events:
            raise GuardrailError(f"token out of order: expected index {self._events}, got {idx}")
        lp = event.logprob
        if lp is None or not (CENSORED_LOGPROB < lp <= 1e-6):
            self._events += 1
            return self._missing(lp, "logprob")
        ls = skel.log_prob(event)
        if not (ls <= 1e-6):  # NaN or > 0: a broken skeleton, not bad provider data
            raise ConfigError(f"skeleton returned an invalid log-probability {ls!r}")
        lift = lp - ls  # as clipped_lift()
        return self.update_lift(0.0 if lift <= 0.0 else (self._b if lift >= self._b else lift))

    def finish(self, finish_reason: str | None = "stop") -> Verdict:
        """End of stream: the final rule if undecided (idempotent).

        ``finish_reason`` is how the stream ended, as the provider says it
        (OpenAI's ``finish_reason``; adapters map other providers onto it).
        Only ``"stop"`` (and ``"length"`` when ``policy.on_length == "answer"``)
        is a finished answer; any other end, ``None`` (no finish seen: the
        stream was cut off) included, gives a BLOCKED verdict with that cause,
        also after an early CERTIFIED: an answer that was not fully seen is
        never certified.
        """
        if self._finished:
            return self._verdict
        self._finished = self._closed = True
        v = self._verdict
        cause = end_cause(finish_reason, self._policy.on_length)
        if cause is not None and v.state is not State.BLOCKED:
            why = _END_REASONS[cause].format(reason=finish_reason, t=self._t)
            return self._final(State.BLOCKED, f"blocked: {why}", v.lower, v.upper, cause)
        if v.final:
            return v
        t, mean, tau = self._t, v.mean, self._tau
        cause = Cause.BELOW_THRESHOLD
        if t == 0:
            ok, why = False, "blocked: empty answer (no token carried evidence)"
            cause = Cause.EMPTY_ANSWER
        elif self._policy.final_rule == "block":
            ok, why = False, f"blocked: no verdict after {t} tokens (final_rule='block')"
            cause = Cause.NO_VERDICT
        else:
            what = {"min": "min", "lowest": f"lowest-{self._k}"}.get(self._policy.aggregate, "mean")
            stat = self._min if self._min_agg else mean
            ok = stat >= tau
            rel = ">=" if ok else "<"
            why = f"final {what} lift {stat:.4g} {rel} tau={tau:g} after {t} tokens"
            why = f"{'certified' if ok else 'blocked'}: {why} (final_rule='mean')"
        cause = Cause.CERTIFIED if ok else cause
        state = State.CERTIFIED if ok else State.BLOCKED
        return self._final(state, why, v.lower, v.upper, cause)

    def abort(self, cause: Cause, reason: str) -> Verdict:
        """Block the answer now for a reason outside the evidence (a refusal, text that
        cannot be reconstructed); an earlier BLOCKED verdict stands (idempotent)."""
        if not isinstance(cause, Cause) or cause in (Cause.UNDECIDED, Cause.CERTIFIED):
            raise ConfigError(f"abort needs a blocking Cause, got {cause!r}")
        v = self._verdict
        if v.state is State.BLOCKED:
            return v
        return self._final(State.BLOCKED, f"blocked: {reason}", v.lower, v.upper, cause)

    def _after_final(self) -> Verdict:
        if self._finished:
            raise GuardrailError(
                "update after the verdict was finished: use one CertificateMonitor per answer"
            )
        return self._verdict

    def _final(self, state: State, why: str, lo: float, up: float, cause: Cause) -> Verdict:
        self._closed = True
        t = self._t
        v = _verdict(state, t, self.mean, lo, up, self._tau, self._boundary, why, True, cause)
        self._verdict = v
        return v

    def _missing(self, value: float | None, what: str) -> Verdict:
        pos, mode = self._events - 1, self._on_missing
        desc = f"{_describe(value)} {what} at token {pos} (value {value!r})"
        if mode == "error":
            raise MissingLogprobsError(f"{desc}; policy on_missing_logprobs='error'")
        if mode == "pass":
            return self._verdict
        why, v = f"blocked: {desc}; policy on_missing_logprobs='block'", self._verdict
        return self._final(State.BLOCKED, why, v.lower, v.upper, Cause.MISSING_LOGPROBS)

    def _decide(self, cert: bool, t: int, lo: float, up: float) -> Verdict:
        word, rel = ("certified", ">") if cert else ("blocked", "<")
        why = f"{word}: evidence that mean lift {rel} {self._tau:g} after {t} tokens"
        state = State.CERTIFIED if cert else State.BLOCKED
        cause = Cause.CERTIFIED if cert else Cause.BELOW_THRESHOLD
        return self._final(state, f"{why} ({self._boundary} boundary)", lo, up, cause)

    def _grid_step(self, xs: float, lam: float) -> tuple[float, float]:
        assert self._grid is not None  # set when tracking
        grid, gu, gd, cu, cd = self._grid
        lo, hi = self._lo, self._hi
        for k in range(lo, hi):  # only candidates still inside the running intersection
            d, a, c = xs - grid[k], cu[k], cd[k]
            gu[k] += log1p((lam if lam < a else a) * d)
            gd[k] += log1p(-(lam if lam < c else c) * d)
        thr = self._thr
        while lo < hi and gu[lo] >= thr:  # K+ is non-increasing in m: a prefix is excluded
            lo += 1
        while hi > lo and gd[hi - 1] >= thr:
            hi -= 1
        self._lo, self._hi, b = lo, hi, self._b
        return (grid[lo - 1] * b if lo else 0.0), (grid[hi] * b if hi < _GRID_SIZE else b)


class GuardedText:
    """What of a streamed answer may be shown now, per streaming mode (pure, no I/O).

    ``passthrough``: each token at once; nothing from a BLOCKED verdict on (its
    token included). ``buffered``: held until CERTIFIED, then the buffer and every
    later token flow; after BLOCKED nothing held is ever released. ``final``: all
    held until :meth:`close` releases it iff CERTIFIED (needs ``early=False``).
    """

    __slots__ = ("_blocked", "_buffer", "_closed", "_mode", "_monitor", "_open")

    def __init__(self, monitor: CertificateMonitor, mode: StreamMode = "buffered") -> None:
        if mode not in ("passthrough", "buffered", "final"):
            raise ConfigError(f"mode must be 'passthrough', 'buffered' or 'final', got {mode!r}")
        if mode == "final" and monitor.policy.early:
            raise ConfigError(
                "mode 'final' decides only at the end: use StreamPolicy(early=False) "
                "so that calibration replays the same rule"
            )
        self._monitor, self._mode = monitor, mode
        self._buffer: list[str] = []
        self._open = mode == "passthrough"
        self._blocked = self._closed = False

    @property
    def mode(self) -> StreamMode:
        return self._mode

    @property
    def blocked(self) -> bool:
        return self._blocked

    @property
    def pending(self) -> str:
        """Text held back so far."""
        return "".join(self._buffer)

    def push(self, text: str, verdict: Verdict) -> str:
        """Record ``text`` (its token gave ``verdict``); return the text to show now."""
        if self._closed:
            raise GuardrailError("push() after close()")
        if self._blocked:
            return ""
        if verdict.state is State.BLOCKED:
            self._blocked = True
            self._buffer.clear()
            return ""
        if self._open:
            return text
        self._buffer.append(text)
        if verdict.state is State.CERTIFIED and self._mode == "buffered":
            self._open = True
            return self._drain()
        return ""

    def close(self, final_verdict: Verdict | None = None) -> str:
        """End of stream: the held text to show (the monitor is finished if no verdict given)."""
        if self._closed:
            return ""
        verdict = self._monitor.finish() if final_verdict is None else final_verdict
        if not verdict.final:
            raise GuardrailError(f"close() needs a final verdict, got {verdict.state.value}")
        self._closed = True
        if self._blocked or verdict.state is not State.CERTIFIED:
            self._blocked = True
            self._buffer.clear()
            return ""
        return self._drain()

    def _drain(self) -> str:
        out = "".join(self._buffer)
        self._buffer.clear()
        return out
