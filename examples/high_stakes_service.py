"""A high-stakes service: nothing uncertified reaches the user (buffered mode), and
every verdict is logged as one structured JSON line.

    pip install -e ".[local,openai]"   # llama.cpp and SmolLM2; the OpenAI client
    python examples/high_stakes_service.py

Uses the OpenAI client directly (any OpenAI-compatible server works the same
way). The rule is the fitted certificate shipped for the bundled SmolLM2
(``smollm2_fitted_certificate()``): a logistic score over the token logprobs,
their top-5 alternatives and the prompt-free lift, for which a second copy of
SmolLM2 scores each answer token without the question (identified by the bytes
the server streams). guarded_chat_completion asks for the logprobs and the
alternatives it reads (``top_logprobs`` 20 unless given; fewer than 5 is
refused before the request is sent). Buffered mode holds the text until the
verdict (mid-answer once no continuation within the token limit can reach the
threshold, else at the answer's end): a blocked answer is never shown. The
calibration's version and guarantee are logged with each verdict so an auditor
can tie every answer to the threshold that let it through. Runs offline
against the local model.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time

import openai

from adapters import guarded_chat_completion
from adapters.local import LocalChatServer, LocalModel, smollm2_fitted_certificate
from guardrail import Certificate, GuardrailBlocked

log = logging.getLogger("service.verdicts")


async def answer(client: openai.AsyncOpenAI, question: str, certificate: Certificate) -> str:
    monitor = certificate.monitor()  # passed along to read its verdict afterwards
    start = time.perf_counter()
    try:
        text = "".join(
            [
                part
                async for part in guarded_chat_completion(
                    client,
                    certificate=certificate,  # applies its system prompt, decoding, limit
                    monitor=monitor,
                    mode="buffered",
                    model="smollm2",
                    messages=[{"role": "user", "content": question}],
                )
            ]
        )
        shown = text
    except GuardrailBlocked:
        shown = "I can't give a reliable answer to that."
    v = monitor.verdict
    log.info(
        json.dumps(
            {
                "event": "verdict",
                "question": question,
                "state": v.state.value,
                "tokens": v.t,
                "tau": v.tau,
                "cause": v.cause.value,
                "reason": v.reason,
                "ms": round(1000 * (time.perf_counter() - start)),
                "certificate": certificate.model.model_id,
                "traces_sha256": certificate.provenance.get("traces_sha256"),
            }
        )
    )
    return shown


async def main() -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(message)s")
    log.setLevel(logging.INFO)
    certificate = smollm2_fitted_certificate()  # loads its own SmolLM2 for the prompt-free lift
    with LocalChatServer(LocalModel()) as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="local", max_retries=0)
        for question in ["What is the chemical symbol for gold?",
                         "Which element has the atomic number 8?"]:  # fmt: skip
            print(f"Q: {question}\nA: {await answer(client, question, certificate)}\n")
        await client.close()


if __name__ == "__main__":
    asyncio.run(main())
