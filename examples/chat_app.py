"""A chat app: one callback in a LangChain chain stops answers that lack evidence.

    python examples/chat_app.py

The callback raises GuardrailBlocked before the chunk that fails the
certificate is yielded, so the user sees the answer up to that point and a
clear reason. The chat model is set up the way the certificate's answers were
generated (its system prompt, greedy decoding, its token limit): the guarantee
covers only such answers. Runs offline against the local model.
"""

from __future__ import annotations

import asyncio
import logging

from langchain_openai import ChatOpenAI

from adapters import LiftGuardCallbackHandler
from adapters.local import LocalChatServer, LocalModel, smollm2_certificate
from guardrail import GuardrailBlocked

QUESTIONS = ["What is the chemical symbol for gold?", "Which element has the atomic number 26?"]


async def main() -> None:
    # LangChain logs every callback error before re-raising it; the example reports it
    logging.getLogger("langchain_core.callbacks.manager").setLevel(logging.CRITICAL)
    certificate = smollm2_certificate()
    context = certificate.context
    with LocalChatServer(LocalModel()) as server:
        handler = LiftGuardCallbackHandler(certificate=certificate)
        llm = ChatOpenAI(
            base_url=server.base_url,
            api_key="local",
            model="smollm2",
            temperature=context.temperature,
            max_tokens=context.max_tokens,
            logprobs=True,
            top_logprobs=5,
            streaming=True,
            callbacks=[handler],
        )
        for question in QUESTIONS:
            print(f"user: {question}\nbot:  ", end="", flush=True)
            messages = [("system", context.system_prompt), ("user", question)]
            try:
                async for chunk in llm.astream(messages):
                    print(chunk.content, end="", flush=True)
                print(f"\n      [certified: {handler.verdicts[-1][1].reason}]\n")
            except GuardrailBlocked as blocked:
                print(f" ...\n      [stopped: {blocked.verdict.reason}]\n")


if __name__ == "__main__":
    asyncio.run(main())
