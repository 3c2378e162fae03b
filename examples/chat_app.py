"""A chat app: one callback in a LangChain chain stops answers that lack evidence.

    python examples/chat_app.py

The callback raises GuardrailBlocked before the chunk that fails the
certificate is yielded, so the user sees the answer up to that point and a
clear reason. Runs offline against the local model.
"""

from __future__ import annotations

import asyncio
import logging

from _local import guard_settings, local_server
from langchain_openai import ChatOpenAI

from adapters import LiftGuardCallbackHandler
from guardrail import GuardrailBlocked

QUESTIONS = ["What is the chemical symbol for gold?", "Which element has the atomic number 26?"]


async def main() -> None:
    # LangChain logs every callback error before re-raising it; the example reports it
    logging.getLogger("langchain_core.callbacks.manager").setLevel(logging.CRITICAL)
    with local_server() as server:
        policy, tau, skeleton = guard_settings(server.model.vocab_size)
        handler = LiftGuardCallbackHandler(policy, tau, skeleton=skeleton)
        llm = ChatOpenAI(
            base_url=server.base_url,
            api_key="local",
            model="smollm2",
            logprobs=True,
            top_logprobs=5,
            streaming=True,
            callbacks=[handler],
        )
        for question in QUESTIONS:
            print(f"user: {question}\nbot:  ", end="", flush=True)
            try:
                async for chunk in llm.astream(question):
                    print(chunk.content, end="", flush=True)
                print(f"\n      [certified: {handler.verdicts[-1][1].reason}]\n")
            except GuardrailBlocked as blocked:
                print(f" ...\n      [stopped: {blocked.verdict.reason}]\n")


if __name__ == "__main__":
    asyncio.run(main())
