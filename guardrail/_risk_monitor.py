"""A live alarm when a certificate's promised selective risk stops holding: :class:`RiskMonitor`.

A certificate promises that at most ``target`` of the answers it lets through are wrong.
The monitor reads the labels of shown answers, in the order they were shown
(``update(correct=...)``), and raises :attr:`RiskMonitor.alarm` once the data show that
the error probability of shown answers has exceeded the target.

**Null hypothesis.** Write ``X_i = 1`` if the ``i``-th labelled shown answer is wrong and
``F_i`` for everything seen up to it. No drift means ``P(X_i = 1 | F_{i-1}) <= target``
for every ``i``, whatever happened before (dependence allowed).

**Guarantee.** Under no drift, ``P(the alarm ever fires) <= alpha``, over any horizon.

**Argument.** Bets ``lam_i^(j)``, ``j = 1..J``, are computed from ``X_1..X_{i-1}`` only
(predictable) and lie in ``[0, c/target]`` with ``c = 0.8``; bet ``j`` is the Kelly bet
``(p - target) / (target (1 - target))`` at an exponentially discounted error rate ``p`` of
half-life ``half_lives[j]``, clipped to that range. Component ``(j, k)`` starts after
``s_k = k * spacing`` answers: ``C_t = prod_{s_k < i <= t} (1 + lam_i^(j) (X_i - target))``,
and ``C_t = 1`` for ``t <= s_k``. Each factor is ``>= 1 - c > 0`` and has conditional
mean ``1 + lam (P(X_i = 1 | F_{i-1}) - target) <= 1`` under the null, so every ``C`` is a
nonnegative supermartingale starting at 1. With weights ``w_k = 1/((k+1)(k+2))``
(``sum_k w_k = 1``) the mixture ``M~_t = (1/J) sum_j sum_k w_k C_t^(j,k)`` is a nonnegative
supermartingale with ``M~_0 = 1``, and Ville's inequality gives
``P(exists t: M~_t >= 1/alpha) <= alpha``. The monitor's statistic ``M_t`` is the same sum
over the components that have started (those not started would add ``w_k`` each), so
``M_t <= M~_t`` and an alarm at ``M_t >= 1/alpha`` has probability at most ``alpha``.
CUSUM-type detectors bound the mean time to a false alarm instead; that is not this.

**Memory.** All components of bet ``j`` share its bets, so
``C_t^(j,k) = W_t^(j) / W_{s_k}^(j)`` with ``W^(j)`` the wealth since the start, and
``sum_k w_k C_t^(j,k) = W_t^(j) * S_t^(j)`` with ``S_t^(j) = sum_{s_k <= t} w_k / W_{s_k}^(j)``
a running sum: O(J) state whatever the horizon, in log space (no overflow), nothing pruned.

**Detection.** A start just after a drift sees only post-drift data; its weight costs
``log((k+1)(k+2))`` nats, which grows like ``2 log(t / spacing)``, slowly, with the good
history. While the error rate stays below the target the bets stay at 0 and the wealth
at 1, so the earliest start keeps its weight 1/2: after a long good history the alarm
comes about as fast as after a short one. The discounted rates adapt within a
half-life of the drift; the mixture over half-lives covers small and large drifts.
On simulated streams (target 0.3, alpha 0.05, error rate 0.2 then 0.4 after 1,000
answers) the median delay is about 230 labelled answers (``benchmarks/bench_risk_monitor.py``).

**Bounds** (:attr:`RiskMonitor.bounds`): an anytime-valid interval for the average
conditional error probability ``(1/n) sum_{s < i <= t} P(X_i = 1 | F_{i-1})`` of the
labelled answers since the window start ``s =`` :attr:`RiskMonitor.bounds_since`, the latest
start ``s_k`` at least ``window`` answers back (0 before then). For start ``k``,
``exp(lam S - lam^2 V / 2)`` with ``S = sum (X_i - P(X_i = 1 | F_{i-1}))`` and ``V = n/4`` is
a supermartingale (Hoeffding's lemma, conditional), and its mixture over
``lam ~ N(0, 1/rho)`` gives Robbins' boundary ``|S| < sqrt(2 (V + rho) log(sqrt((V + rho)/rho)
/ delta))``, at ``delta = alpha w_k``. Over all ``k`` and all times, every interval holds at
once with probability at least ``1 - alpha``. It is a separate statement from the alarm
(each holds at level ``alpha``), about a recent window: it can hold the target while the
alarm is on (the alarm's evidence may predate the window, or the window be too short).

**Lower bound** (:attr:`RiskMonitor.lower_bound`): the alarm's own bets, placed at other
levels. For a level ``m`` the bet of half-life ``j`` is ``min(lam_i^(j), c/m)``, the target's
bet capped so that each factor ``1 + bet (X_i - m)`` stays ``>= 1 - c``; the restarts and
weights are the target's. Under "``P(X_i = 1 | F_{i-1}) <= m`` for every ``i``" the mixture
at ``m`` is again a nonnegative supermartingale, so it ever reaches ``1/alpha`` with
probability at most ``alpha``; at ``m = target`` it is ``M_t`` itself. Each factor is
nonincreasing in ``m`` (``bet (1 - m)`` and ``-min(lam m, c)`` both are), so the levels
reached so far are all those up to some ``m``: the lower bound, the highest level of a grid
(the target and the multiples of ``LOWER_BOUND_STEP``) reached so far, 0 if none. It is at
least the target exactly when the alarm is on (the levels above the target count from the
alarm on, so rounding cannot part the two), and if every conditional error probability
is at most ``m`` it ever reaches ``m`` with probability at most ``alpha``.

**Coverage** (``update_shown``): the share of all answers shown. With an expected
``coverage``, the same detector tests "each answer is shown with conditional probability
``>= coverage``" (the events are the answers not shown, the level ``1 - coverage``); its
alarm is :attr:`RiskMonitor.coverage_warning`, a warning (logged once), never a risk alarm.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
from collections import deque
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ._errors import ConfigError

__all__ = ["RiskMonitor"]


FloatArray = npt.NDArray[np.float64]
BET_CAP = 0.8
"""Bets stay in ``[0, BET_CAP / level]``: each factor is at least ``1 - BET_CAP``."""
DEFAULT_HALF_LIVES = (25.0, 50.0, 100.0, 200.0)
DEFAULT_SPACING = 100
DEFAULT_WINDOW = 500
LOWER_BOUND_STEP = 0.005
"""The resolution of :attr:`RiskMonitor.lower_bound`: the levels it tests, besides the target."""
_STATE_FORMAT = 1
"""The layout of :meth:`RiskMonitor.to_bytes` (a reader refuses any other)."""
_RHO_SHARE = 0.1
"""Robbins' mixture parameter ``rho`` as a share of ``V = window / 4`` (tightest near it)."""


def _restart_level(alpha: float, restarts: int) -> float:
    """The level of the ``restarts``-th test of one promise (0: the first): ``alpha * 6 /
    (pi^2 (restarts + 1)^2)``. The levels sum to ``alpha`` over all restarts, so when a
    test's evidence is lost and a fresh one starts, each at the next level, the alarm of
    any of them fires falsely with probability at most ``alpha`` (a union bound), however
    many restarts there are. The first test runs at ``0.61 alpha``.

    >>> levels = [_restart_level(0.05, k) for k in (0, 1)]
    >>> [round(a, 4) for a in levels]
    [0.0304, 0.0076]
    """
    k = _nonnegative("restarts", restarts)
    return _probability("alpha", alpha) * 6.0 / (math.pi**2 * (k + 1.0) ** 2)


def _nonnegative(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{name} must be an integer >= 0, got {value!r}")
    return value


@functools.lru_cache(maxsize=64)
def _grid(target: float) -> tuple[float, ...]:
    """The levels of the lower bound besides ``target``: the multiples of
    ``LOWER_BOUND_STEP`` in (0, 1)."""
    steps = range(1, round(1.0 / LOWER_BOUND_STEP))
    return tuple(g for g in (i * LOWER_BOUND_STEP for i in steps) if g != target)


def _log_weight(k: int) -> float:
    """``log w_k`` of the start ``k``: ``w_k = 1/((k+1)(k+2))``, summing to 1 over ``k >= 0``."""
    return -math.log((k + 1.0) * (k + 2.0))


def _probability(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
        raise ConfigError(f"{name} must be a number strictly inside (0, 1), got {value!r}")
    return float(value)


def _check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool | np.bool_):
        raise ConfigError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def _rates(half_lives: Sequence[float]) -> tuple[float, ...]:
    """The discount rate of each half-life (a ConfigError for a bad one)."""
    if isinstance(half_lives, str | bytes) or not isinstance(half_lives, Sequence):
        raise ConfigError(f"half_lives must be a sequence of numbers, got {half_lives!r}")
    if not half_lives:
        raise ConfigError("half_lives must not be empty")
    for h in half_lives:
        if isinstance(h, bool) or not isinstance(h, int | float) or not 0 < h < math.inf:
            raise ConfigError(f"half_lives: each must be a finite number > 0, got {h!r}")
    return tuple(1.0 - 0.5 ** (1.0 / float(h)) for h in half_lives)


def _count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
    return value


class _Detector:
    """The restarted betting e-process for "``P(x_i = 1 | past) <= level`` for every ``i``"
    (see the module docstring), and the same bets at each level of ``grid`` (its lower
    bound). Its value (:meth:`update`'s return, :attr:`value`) is :attr:`log_e`;
    :func:`_detector_path` is its batch twin."""

    __slots__ = (
        "_caps",
        "_level",
        "_levels",
        "_log_s",
        "_log_w",
        "_p",
        "_rates",
        "_spacing",
        "log_e",
        "n",
    )

    def __init__(
        self, level: float, spacing: int, rates: tuple[float, ...], grid: Sequence[float] = ()
    ) -> None:
        self._level, self._spacing = level, spacing
        self._rates = np.asarray(rates, dtype=np.float64)
        self._levels = np.asarray((level, *grid), dtype=np.float64)[:, None]  # row 0: level
        self._caps = BET_CAP / self._levels
        shape = (self._levels.size, len(rates))
        self._p = np.full(len(rates), level)  # discounted rates, started where the bet is 0
        self._log_w = np.zeros(shape)  # log W^(j) at each level
        self._log_s = np.full(shape, -np.inf)  # log S^(j) at each level
        self.n = 0
        self.log_e: FloatArray = np.zeros(self._levels.size)
        """``log M_t`` at ``level`` (row 0) and at each level of ``grid`` (0: no evidence yet)."""

    def arrays(self) -> tuple[FloatArray, ...]:
        """The state besides :attr:`n`, in the order :meth:`RiskMonitor.to_bytes` writes it
        (arrays the detector owns: filling them in place restores a state)."""
        return self._p, self._log_w, self._log_s, self.log_e

    def update(self, x: bool) -> FloatArray:
        """Take one event (``True`` = the event the level bounds); :attr:`value`."""
        level, n = self._level, self.n
        xv = 1.0 if x else 0.0
        if n % self._spacing == 0:
            self._log_s = np.logaddexp(self._log_s, _log_weight(n // self._spacing) - self._log_w)
        lam = np.clip((self._p - level) / (level * (1.0 - level)), 0.0, BET_CAP / level)
        self._log_w += np.log1p(np.minimum(lam, self._caps) * (xv - self._levels))
        self._p += self._rates * (xv - self._p)
        self.n = n + 1
        total = np.logaddexp.reduce(self._log_w + self._log_s, axis=-1)
        self.log_e = total - math.log(self._rates.size)
        return self.log_e

    @property
    def value(self) -> FloatArray:
        """:attr:`log_e` (zeros before any event)."""
        return self.log_e


def _detector_path(
    x: npt.ArrayLike,
    level: float,
    spacing: int,
    rates: tuple[float, ...],
    grid: Sequence[float] = (),
) -> FloatArray:
    """``log M_t`` after every event of ``x`` (shape ``(..., T)``: leading axes are
    independent streams) at ``level`` and at each level of ``grid`` (last axis, ``level``
    first), computed over whole arrays; equals :class:`_Detector`'s."""
    xs = np.asarray(x, dtype=np.float64)
    a = np.asarray(rates, dtype=np.float64)
    levels = np.asarray((level, *grid), dtype=np.float64)[:, None]
    lead = xs.shape[:-1]
    p = np.full((*lead, 1, a.size), level)
    log_w = np.zeros((*lead, levels.size, a.size))
    log_s = np.full(log_w.shape, -np.inf)
    out = np.empty((*xs.shape, levels.size), dtype=np.float64)
    kelly, cap = level * (1.0 - level), BET_CAP / level
    for t in range(xs.shape[-1]):
        if t % spacing == 0:
            log_s = np.logaddexp(log_s, _log_weight(t // spacing) - log_w)
        xt = xs[..., t, None, None]
        lam = np.minimum(np.clip((p - level) / kelly, 0.0, cap), BET_CAP / levels)
        log_w = log_w + np.log1p(lam * (xt - levels))
        p = p + a * (xt - p)
        out[..., t, :] = np.logaddexp.reduce(log_w + log_s, axis=-1) - math.log(a.size)
    return out


def _radius(n: int, delta: float, rho: float) -> float:
    """Robbins' normal-mixture boundary on ``|sum (X_i - mean_i)|`` after ``n`` values in
    [0, 1] (variance proxy 1/4 each), at level ``delta``, divided by ``n``."""
    v = n / 4.0 + rho
    return math.sqrt(2.0 * v * (math.log(1.0 / delta) + 0.5 * math.log(v / rho))) / n


class RiskMonitor:
    """An anytime-valid alarm on the selective risk of the answers a certificate shows.

    ``RiskMonitor(target=0.3, alpha=0.05)``; :meth:`Certificate.risk_monitor` gives one
    with the certificate's own target and expected coverage. Feed each labelled shown
    answer, in the order shown, with ``update(correct=...)``; :attr:`alarm` is True once
    the data show that shown answers are wrong with probability above ``target`` (and
    stays True). It is the monitor's value: ``update`` returns it and :attr:`value`
    reads it again. If each shown answer's conditional error probability is at most
    ``target``, whatever came before, the alarm fires with probability at most ``alpha``
    over any horizon; after a drift it fires within a few hundred labels, however long
    the good history before it. The argument is in ``guardrail/_risk_monitor.py``'s
    docstring.

    :attr:`lower_bound` is the lower confidence bound of the alarm's own test: the
    error probability of shown answers has been shown to exceed it, and :attr:`alarm`
    is True exactly when it is at least ``target``. :attr:`bounds` is a separate
    anytime-valid interval (level ``alpha``) for the average conditional error
    probability of the labelled answers since :attr:`bounds_since` (a window of
    ``window`` to ``window + spacing`` recent answers): it can hold the target while
    the alarm is on.

    ``update_shown(shown)`` takes every answer's verdict (shown or not, labelled or
    not); with ``coverage`` (the share of answers the certificate is expected to show)
    :attr:`coverage_warning` is True once the data show a lower share: a warning, never a
    risk alarm. ``spacing`` (answers between restarts), ``half_lives`` (of the bets'
    discounted error rates) and ``window`` tune detection and the bounds; the guarantee
    holds for any values. O(1) time and memory per answer (O(window / spacing) for the
    bounds, O(1 / LOWER_BOUND_STEP) for the lower bound: some 0.1 ms a label).

    Examples
    --------
        >>> monitor = RiskMonitor(target=0.2, alpha=0.05)
        >>> for _ in range(50):
        ...     alarm = monitor.update(correct=False)
        >>> monitor.n, monitor.alarm
        (50, True)
    """

    def __init__(
        self,
        target: float,
        alpha: float = 0.05,
        *,
        coverage: float | None = None,
        spacing: int = DEFAULT_SPACING,
        half_lives: Sequence[float] = DEFAULT_HALF_LIVES,
        window: int = DEFAULT_WINDOW,
    ) -> None:
        self.target = _probability("target", target)
        self.alpha = _probability("alpha", alpha)
        self.coverage = None if coverage is None else _probability("coverage", coverage)
        self.spacing = _count("spacing", spacing)
        self.window = _count("window", window)
        rates = _rates(half_lives)
        self.half_lives = tuple(float(h) for h in half_lives)
        self._threshold = math.log(1.0 / self.alpha)
        grid = _grid(self.target)
        self._risk = _Detector(self.target, self.spacing, rates, grid)
        self._levels = np.asarray((self.target, *grid))  # the rows of the detector's log_e
        self._crossed = np.zeros(self._levels.size, dtype=np.bool_)  # at some time so far
        self._shown = (
            None if self.coverage is None else _Detector(1.0 - self.coverage, self.spacing, rates)
        )
        self.errors = 0
        """Wrong answers among the labelled ones."""
        self.alarm_at: int | None = None
        """How many labelled answers had been fed when the alarm fired (``None``: not yet)."""
        self.answers = 0
        """Answers given to :meth:`update_shown`."""
        self.shown = 0
        """Of those, answers shown."""
        self.coverage_warning_at: int | None = None
        """How many answers :meth:`update_shown` had taken when the coverage warning fired."""
        self._starts: deque[tuple[int, int]] = deque([(0, 0)])  # (s_k, errors at s_k)

    def to_bytes(self) -> bytes:
        """The monitor's whole state, exactly (float64 bytes): :meth:`from_bytes` gives a
        monitor whose every report and every later update equal this one's. Its size
        depends on the settings only, never on how many labels were fed (some 15 kB): the
        state several replicas share."""
        head = {
            "format": _STATE_FORMAT,
            "target": self.target,
            "alpha": self.alpha,
            "coverage": self.coverage,
            "spacing": self.spacing,
            "window": self.window,
            "half_lives": list(self.half_lives),
            "errors": self.errors,
            "alarm_at": self.alarm_at,
            "answers": self.answers,
            "shown": self.shown,
            "coverage_warning_at": self.coverage_warning_at,
            "starts": [list(start) for start in self._starts],
            "n": self._risk.n,
            "shown_n": None if self._shown is None else self._shown.n,
        }
        parts = [json.dumps(head, separators=(",", ":")).encode("ascii"), b"\n"]
        parts += [a.astype("<f8").tobytes() for a in self._state_arrays()]
        parts.append(self._crossed.astype(np.uint8).tobytes())
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, data: bytes) -> RiskMonitor:
        """The monitor :meth:`to_bytes` wrote; ``ValueError`` for bytes it did not write."""
        try:
            raw_head, body = bytes(data).split(b"\n", 1)
            head = json.loads(raw_head)
            if head.get("format") != _STATE_FORMAT:
                raise ValueError(f"format {head.get('format')!r}")
            monitor = cls(
                head["target"],
                head["alpha"],
                coverage=head["coverage"],
                spacing=head["spacing"],
                half_lives=head["half_lives"],
                window=head["window"],
            )
            arrays = monitor._state_arrays()
            sizes = [a.size * 8 for a in arrays]
            if len(body) != sum(sizes) + monitor._crossed.size:
                raise ValueError(f"{len(body)} bytes of state")
            at = 0
            for array, size in zip(arrays, sizes, strict=True):
                array[...] = np.frombuffer(body, "<f8", array.size, at).reshape(array.shape)
                at += size
            monitor._crossed[...] = np.frombuffer(body, np.uint8, offset=at) != 0
            monitor._risk.n = _nonnegative("n", head["n"])
            if monitor._shown is not None:
                monitor._shown.n = _nonnegative("shown_n", head["shown_n"])
            monitor.errors, monitor.alarm_at = head["errors"], head["alarm_at"]
            monitor.answers, monitor.shown = head["answers"], head["shown"]
            monitor.coverage_warning_at = head["coverage_warning_at"]
            monitor._starts = deque((int(s), int(e)) for s, e in head["starts"])
        except (ValueError, KeyError, TypeError, ConfigError) as exc:
            raise ValueError(f"not a risk monitor's state ({exc})"[:300]) from None
        return monitor

    def _state_arrays(self) -> list[FloatArray]:
        out = list(self._risk.arrays())
        if self._shown is not None:
            out += self._shown.arrays()
        return out

    @staticmethod
    def restart_level(alpha: float, restarts: int) -> float:
        """The level of the ``restarts``-th test of one promise (0: the first):
        ``alpha * 6 / (pi^2 (restarts + 1)^2)``, summing to ``alpha`` over all restarts (see
        ``_restart_level``)."""
        return _restart_level(alpha, restarts)

    @classmethod
    def alarms_with_restarts(
        cls,
        wrong: npt.ArrayLike,
        target: float,
        alpha: float,
        restarts_at: Sequence[int] = (),
        *,
        spacing: int = DEFAULT_SPACING,
        half_lives: Sequence[float] = DEFAULT_HALF_LIVES,
    ) -> npt.NDArray[np.int64]:
        """How many labels of ``wrong`` (True = wrong; shape ``(..., T)``, leading axes
        independent streams) had been fed when an alarm first fired, 0 where none did, when
        the test's evidence is lost before each label index of ``restarts_at`` (increasing) and
        a fresh :class:`RiskMonitor` starts there: test ``k`` (0 first) at
        ``restart_level(alpha, k)``. The batch twin of feeding the labels to such a sequence of
        monitors; at a target every label meets, alarms fire in at most an ``alpha`` share of
        the streams however many restarts there are."""
        xs = np.asarray(wrong, dtype=np.bool_)
        bounds = [0, *restarts_at, xs.shape[-1]]
        if any(b <= a for a, b in itertools.pairwise(bounds)):
            raise ConfigError(
                f"restarts_at must increase inside (0, {xs.shape[-1]}), got {restarts_at!r}"
            )
        first = np.zeros(xs.shape[:-1], dtype=np.int64)
        for k, (lo, hi) in enumerate(itertools.pairwise(bounds)):
            path = cls.log_e_path(xs[..., lo:hi], target, spacing=spacing, half_lives=half_lives)
            crossed = path >= math.log(1.0 / cls.restart_level(alpha, k))
            at = np.where(crossed.any(axis=-1), crossed.argmax(axis=-1) + 1 + lo, 0)
            first = np.where(first == 0, at, first)
        return first

    @classmethod
    def log_e_path(
        cls,
        wrong: npt.ArrayLike,
        target: float,
        *,
        spacing: int = DEFAULT_SPACING,
        half_lives: Sequence[float] = DEFAULT_HALF_LIVES,
    ) -> FloatArray:
        """:attr:`log_e_value` after every label of ``wrong`` (True = wrong), computed over
        whole arrays: the batch twin of :meth:`update`. ``wrong`` may have leading axes
        (independent streams, e.g. simulations); the alarm is at the first index where
        the path reaches ``log(1/alpha)``."""
        return _detector_path(
            wrong, _probability("target", target), _count("spacing", spacing), _rates(half_lives)
        )[..., 0]

    @property
    def n(self) -> int:
        """Labelled shown answers fed so far."""
        return self._risk.n

    @property
    def log_e_value(self) -> float:
        """``log M_t``, the log of the weighted e-process (0 before any label: the e-value
        of no evidence is 1); the alarm fires when it reaches ``log(1/alpha)``."""
        return float(self._risk.log_e[0])

    @property
    def alarm(self) -> bool:
        """The realised risk has been shown to exceed the target (sticky)."""
        return self.alarm_at is not None

    @property
    def value(self) -> bool:
        """:attr:`alarm`, what :meth:`update` returns (False before any label)."""
        return self.alarm

    @property
    def coverage_warning(self) -> bool:
        """The share of answers shown has been shown to fall below ``coverage`` (sticky)."""
        return self.coverage_warning_at is not None

    @property
    def error_rate(self) -> float:
        """Share of the labelled answers that were wrong (NaN before any)."""
        return self.errors / self.n if self.n else math.nan

    @property
    def shown_rate(self) -> float:
        """Share of the answers given to :meth:`update_shown` that were shown (NaN before)."""
        return self.shown / self.answers if self.answers else math.nan

    def update(self, *, correct: bool) -> bool:
        """Take the label of one shown answer; return :attr:`alarm`."""
        wrong = not _check_bool("correct", correct)
        n = self._risk.n
        if n % self.spacing == 0 and n:
            self._starts.append((n, self.errors))
        self.errors += wrong
        self._crossed |= self._risk.update(wrong) >= self._threshold
        if self._crossed[0] and self.alarm_at is None:  # row 0: the target
            self.alarm_at = self._risk.n  # (reported by the caller: the proxy logs it)
        while len(self._starts) > 1 and self.n - self._starts[1][0] >= self.window:
            self._starts.popleft()
        return self.alarm

    def update_shown(self, shown: bool) -> bool:
        """Take one answer's verdict (shown or not); return :attr:`coverage_warning`."""
        was_shown = _check_bool("shown", shown)
        self.answers += 1
        self.shown += was_shown
        if self._shown is None:
            return False
        if self._shown.update(not was_shown)[0] >= self._threshold and not self.coverage_warning:
            self.coverage_warning_at = self.answers
        return self.coverage_warning

    @property
    def lower_bound(self) -> float:
        """The lower confidence bound of the alarm's own test: the highest level ``m`` (the
        target, or a multiple of ``LOWER_BOUND_STEP``) that the same bets have shown the
        error probability of shown answers to exceed, at some time so far; 0 while none.
        :attr:`alarm` is True exactly when it is at least ``target``. Non-decreasing. If
        every shown answer's conditional error probability is at most ``m``, it ever
        reaches ``m`` with probability at most ``alpha``."""
        seen = self._crossed & ((self._levels < self.target) | self.alarm)
        return float(self._levels[seen].max()) if seen.any() else 0.0

    @property
    def bounds_since(self) -> int:
        """The window start of :attr:`bounds`: they cover labelled answers after this many."""
        return self._starts[0][0]

    @property
    def bounds(self) -> tuple[float, float]:
        """``(lower, upper)``: anytime-valid bounds (level ``alpha``) on the average
        conditional error probability of the labelled answers after :attr:`bounds_since`;
        ``(0, 1)`` before any. Not the alarm's test: see :attr:`lower_bound`."""
        since, errors_then = self._starts[0]
        n = self.n - since
        if n == 0:
            return 0.0, 1.0
        delta = self.alpha * math.exp(_log_weight(since // self.spacing))
        r = _radius(n, delta, _RHO_SHARE * self.window / 4.0)
        rate = (self.errors - errors_then) / n
        return max(0.0, rate - r), min(1.0, rate + r)
