"""An agent whose LLM-backed tool is wrapped: an uncertified tool answer becomes a
tool error the agent can react to, never a silent wrong fact.

    pip install -e ".[local,langchain]"   # llama.cpp and SmolLM2; LangChain
    python examples/agent_tool.py

A tiny agent loop calls a 'lookup' tool that asks a chat model; guard_tool
makes a blocked answer a ToolException, which the agent receives as the tool's
output (handle_tool_error=True) and turns into "I could not verify that".

The rule is the fitted certificate shipped for the bundled SmolLM2
(``smollm2_fitted_certificate()``: a logistic score over the token logprobs, their
top-5 alternatives and the prompt-free lift, for which a second copy of SmolLM2
scores each answer token without the question). The tool's chat model must
stream ``logprobs=True, top_logprobs=5``: guard_tool checks it now (``model=llm``).
The agent sees the tool's answer only once it is decided, so a blocked fact never
reaches it, whether the fitted score rules the answer out mid-way (as for the
second question here) or only at its end. Runs offline against the local model.
"""

from __future__ import annotations

import asyncio
import logging

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from adapters import guard_tool
from adapters.local import LocalChatServer, LocalModel, smollm2_fitted_certificate


async def main() -> None:
    # LangChain logs every callback error before re-raising it; the example reports it
    logging.getLogger("langchain_core.callbacks.manager").setLevel(logging.CRITICAL)
    certificate = smollm2_fitted_certificate()  # loads its own SmolLM2 for the prompt-free lift
    context = certificate.context
    with LocalChatServer(LocalModel()) as server:
        llm = ChatOpenAI(
            base_url=server.base_url, api_key="local", model="smollm2",
            temperature=context.temperature, max_tokens=context.max_tokens,
            stop=list(context.stop) or None,  # as the certificate's answers were generated
            logprobs=True, top_logprobs=5, streaming=True,  # 5: what the statistic reads
        )  # fmt: skip

        @tool
        async def lookup(question: str) -> str:
            """Answer a factual question with the company's language model."""
            messages = [("system", context.system_prompt), ("user", question)]
            return str((await llm.ainvoke(messages)).content)

        safe_lookup = guard_tool(lookup, certificate=certificate, handle_tool_error=True, model=llm)
        for question in ["What is the chemical symbol for gold?",
                         "Which element has the atomic number 8?"]:  # fmt: skip
            result = await safe_lookup.ainvoke({"question": question})
            if "blocked by liftguard" in result:
                print(f"agent: I could not verify an answer to {question!r}.\n  tool: {result}\n")
            else:
                print(f"agent: {question} -> {result}\n")


if __name__ == "__main__":
    asyncio.run(main())
