"""An escalated chat completion: one guarded pass, and K samples only where it is undecided.

:func:`escalated_chat_completion` deploys a calibrated
:class:`~guardrail.evaluate.Escalation` on an OpenAI-compatible client. The single pass
is the request :func:`~adapters.guarded_chat_completion` makes, guarded by the
certificate's statistic with every word held back (``mode="final"``); what it
reads is the answer's final score, the scale :meth:`Escalation.band
<guardrail.evaluate.Escalation.band>` is read on (``fitted_method(traces,
certificate).final``). Where that score lies in the band and the rule needs them,
``samples`` plain requests are sent concurrently and the answer is shown iff the
rule shows it with their agreement; the text is returned only then.

Usage::

    answer = await escalated_chat_completion(
        client, certificate=certificate, escalation=rule, final_answer=final_number,
        messages=[{"role": "user", "content": question}],
    )
    print(answer.text if answer.shown else f"refused ({answer.cause})")
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, cast

from guardrail import Cause, Certificate, ConfigError, State
from guardrail._escalation import Escalation

from ._openai import _import_openai, guarded_chat_completion, prepared_request

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["EscalatedAnswer", "Outcome", "escalated_chat_completion"]

logger = logging.getLogger(__name__)

Outcome = Literal[
    "certified", "agreed", "disagreed", "below_threshold", "below_band", "blocked",
    "sample_failed",
]  # fmt: skip
"""Why an escalated answer was shown or refused (see :class:`EscalatedAnswer`)."""

_NOT_SAMPLED = ("stream", "stream_options", "logprobs", "top_logprobs", "temperature", "seed")
"""What the single pass's request sets that a sample request replaces or drops."""
_CALLERS_NOT = ("stream", "n")
"""What the caller may not set: the function decides how each request streams, and
draws the samples as requests of their own."""


@dataclass(frozen=True)
class EscalatedAnswer:
    """What :func:`escalated_chat_completion` decided about one answer, and what it cost.

    ``text`` is the answer (``None`` unless ``shown``). ``cause``: ``"certified"`` (shown
    on its single-pass score alone: above the band, or in it where the rule shows every
    answer there), ``"agreed"`` / ``"disagreed"`` (in the band, shown or refused by its
    samples' agreement), ``"below_threshold"`` (refused on its single-pass score alone: in
    or above the band, with the rule's threshold above that part of its scale),
    ``"below_band"`` (a finished answer scored below the band), ``"blocked"`` (the guard
    stopped it or it did not finish: cut off, cut at its token limit, a refusal, a tool
    call, a token without a logprob; ``score`` is then ``None``), ``"sample_failed"`` (a
    sample request failed: refused, undecided). ``score``: the single pass's final score;
    ``consistency``: the samples' agreement with it (``None`` without samples).
    ``answer_tokens``: the single pass's tokens the guard read; ``sample_tokens``: the
    completion tokens the samples used, as their ``usage`` reports (0 where it does not).

    Examples
    --------
        >>> answer = EscalatedAnswer(None, shown=False, cause="disagreed", score=-1.6,
        ...                          consistency=0.4, answer_tokens=120, sample_tokens=610)
        >>> answer.shown, answer.answer_tokens + answer.sample_tokens
        (False, 730)
    """

    text: str | None
    shown: bool
    cause: Outcome
    score: float | None
    consistency: float | None
    answer_tokens: int
    sample_tokens: int


async def escalated_chat_completion(
    client: AsyncOpenAI,
    *,
    certificate: Certificate,
    escalation: Escalation,
    final_answer: Callable[[str], Hashable | None],
    samples: int = 5,
    sample_temperature: float = 0.7,
    **create_kwargs: Any,
) -> EscalatedAnswer:
    """Answer with ``escalation`` deciding: one guarded pass, and ``samples`` more
    generations only for an answer whose single-pass score lies in the band.

    The single pass is ``client.chat.completions.create(**create_kwargs)`` as
    :func:`~adapters.guarded_chat_completion` sends it (``stream`` and ``logprobs``
    forced, the certificate's generation context filled in, a change of it warned
    about), guarded by the certificate's statistic read to the end of the answer with
    the whole text held back: its score is the statistic's final value
    (:attr:`Monitor.value <guardrail.Monitor.value>`), the certificate's final score on
    which ``escalation`` was fitted and calibrated (:meth:`Escalation.band
    <guardrail.evaluate.Escalation.band>`: ``fitted_method(traces, certificate).final``).
    So the guard runs the certificate's rule at ``tau=escalation.low`` without early
    verdicts (an early certification would stop the score short of the end), and only
    an answer that finished (``finish_reason`` ``"stop"``) with a score of at least
    ``low`` is delivered to this function; every other answer is refused, unsampled.

    Above the band the score decides alone. In the band, when the rule needs them
    (:meth:`~guardrail.evaluate.Escalation.needs_samples`), ``samples`` requests are sent
    concurrently: the same request without streaming and logprobs, at
    ``temperature=sample_temperature`` and ``seed`` 0 to ``samples - 1`` (reproducible
    where the server honours seeds); each first choice's ``message.content`` gives a
    final answer (``final_answer``; none for a choice without text), and the answer is
    shown iff :meth:`~guardrail.evaluate.Escalation.shows` with their
    :meth:`~guardrail.evaluate.Escalation.agreement` with its own. A sample request that
    fails (an ``openai.APIError``) refuses the answer (cause ``"sample_failed"``).

    Returns an :class:`EscalatedAnswer`, whose ``text`` is ``None`` unless the rule
    showed it. A :class:`~guardrail.ConfigError` before any request for bad arguments
    (``samples`` below 1, a temperature that is not a finite number >= 0, ``stream`` or
    ``n`` in ``create_kwargs``, a band off a lift certificate's scale, and what
    :func:`~adapters.guarded_chat_completion` refuses); errors of the single pass
    propagate as they do there.
    """
    openai = _import_openai()
    _check(certificate, escalation, final_answer, samples, sample_temperature, create_kwargs)
    single = _single_pass_certificate(certificate, escalation)
    sent, monitor, _ = prepared_request(single, None, create_kwargs)
    held = guarded_chat_completion(
        client, monitor=monitor, apply_certificate_context=False, mode="final",
        on_block="stop", **sent,
    )  # fmt: skip
    async with contextlib.aclosing(held) as texts:
        text = "".join([t async for t in texts])
    verdict, tokens = monitor.verdict, monitor.t
    if verdict.state is not State.CERTIFIED:  # nothing was released: ``text`` is empty
        below = verdict.cause is Cause.BELOW_THRESHOLD  # (the final rule: read to the end)
        score = monitor.value if below else None
        return EscalatedAnswer(None, False, "below_band" if below else "blocked", score,
                               None, tokens, 0)  # fmt: skip
    score = monitor.value
    if not escalation.needs_samples(score):
        shown = escalation.shows(score)
        cause: Outcome = "certified" if shown else "below_threshold"
        return EscalatedAnswer(text if shown else None, shown, cause, score, None, tokens, 0)
    requests = [_sample_request(sent, sample_temperature, seed) for seed in range(samples)]
    drawn = await asyncio.gather(*(_sample(client, r, openai.APIError) for r in requests))
    got = [d for d in drawn if d is not None]
    used = sum(n for _, n in got)
    if len(got) < len(drawn):
        return EscalatedAnswer(None, False, "sample_failed", score, None, tokens, used)
    finals = [None if sample is None else final_answer(sample) for sample, _ in got]
    consistency = Escalation.agreement(final_answer(text), finals)
    shown = escalation.shows(score, consistency)
    return EscalatedAnswer(text if shown else None, shown, "agreed" if shown else "disagreed",
                           score, consistency, tokens, used)  # fmt: skip


def _check(
    certificate: object,
    escalation: object,
    final_answer: object,
    samples: object,
    temperature: object,
    create_kwargs: Mapping[str, Any],
) -> None:
    if not isinstance(certificate, Certificate):
        raise ConfigError(
            f"certificate must be a guardrail.Certificate, got {type(certificate).__name__}"
        )
    if not isinstance(escalation, Escalation):
        raise ConfigError(
            f"escalation must be a guardrail.evaluate.Escalation, got {type(escalation).__name__}"
        )
    if not callable(final_answer):
        raise ConfigError(f"final_answer must be a callable (text -> final answer or None), "
                          f"got {final_answer!r}")  # fmt: skip
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ConfigError(f"samples must be an integer >= 1, got {samples!r}")
    number = isinstance(temperature, int | float) and not isinstance(temperature, bool)
    if not (number and math.isfinite(cast(float, temperature)) and cast(float, temperature) >= 0):
        raise ConfigError(f"sample_temperature must be a finite number >= 0, got {temperature!r}")
    extra = create_kwargs.get("extra_body")
    given = {*create_kwargs, *(extra if isinstance(extra, Mapping) else ())}
    for key in _CALLERS_NOT:
        if key in given:
            raise ConfigError(
                f"escalated_chat_completion takes no {key}=: it streams the single pass and "
                "sends each sample as a request of its own"
            )


def _single_pass_certificate(certificate: Certificate, escalation: Escalation) -> Certificate:
    """The rule the single pass is guarded by: the certificate's statistic at
    ``tau=escalation.low``, decided only at a finished answer's end by its final score
    (no early verdict, no certified answer cut at its token limit); not calibrated (the
    escalation's calibration backs the decision)."""
    low, clip = escalation.low, certificate.policy.clip
    if certificate.statistic is None and not 0.0 < low < clip:
        raise ConfigError(
            f"escalation.low={low!r} is off this lift certificate's scale (its tau lies "
            f"strictly inside (0, {clip})): fit the band on its final scores"
        )
    policy = replace(certificate.policy, early=False, final_rule="mean", on_length="block")
    return replace(certificate, policy=policy, tau=low, calibration=None)


def _sample_request(sent: Mapping[str, Any], temperature: float, seed: int) -> dict[str, Any]:
    """The single pass's request as a plain sample: not streamed, without logprobs, at
    ``temperature`` with ``seed`` (also out of ``extra_body``, whose keys would win)."""
    out = {k: v for k, v in sent.items() if k not in _NOT_SAMPLED}
    extra = out.pop("extra_body", None)
    if isinstance(extra, Mapping) and (rest := {k: v for k, v in extra.items()
                                                if k not in _NOT_SAMPLED}):  # fmt: skip
        out["extra_body"] = rest
    return {**out, "temperature": temperature, "seed": seed}


async def _sample(
    client: AsyncOpenAI, request: dict[str, Any], failure: type[Exception]
) -> tuple[str | None, int] | None:
    """One sample: its first choice's text (``None`` without any) and the completion tokens
    its ``usage`` reports; ``None`` when the request fails with ``failure``."""
    try:
        response = await cast(Any, client).chat.completions.create(**request)
    except failure as exc:
        logger.warning("an escalation sample (seed %s) failed: %s", request["seed"], exc)
        return None
    choices, usage = response.choices, response.usage
    text = choices[0].message.content if choices else None
    used = getattr(usage, "completion_tokens", None) if usage is not None else None
    return text, used if isinstance(used, int) else 0
