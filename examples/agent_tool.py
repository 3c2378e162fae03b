"""An agent whose LLM-backed tool is wrapped: an uncertified tool answer becomes a
tool error the agent can react to, never a silent wrong fact.

    python examples/agent_tool.py

A tiny agent loop calls a 'lookup' tool that asks a chat model; guard_tool
makes a blocked answer a ToolException, which the agent receives as the tool's
output (handle_tool_error=True) and turns into "I could not verify that".
Runs offline against the local model.
"""

from __future__ import annotations

import asyncio
import logging

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from adapters import guard_tool
from adapters.local import LocalChatServer, LocalModel, smollm2_certificate


async def main() -> None:
    # LangChain logs every callback error before re-raising it; the example reports it
    logging.getLogger("langchain_core.callbacks.manager").setLevel(logging.CRITICAL)
    certificate = smollm2_certificate()
    context = certificate.context
    with LocalChatServer(LocalModel()) as server:
        llm = ChatOpenAI(
            base_url=server.base_url, api_key="local", model="smollm2",
            temperature=context.temperature, max_tokens=context.max_tokens,
            logprobs=True, top_logprobs=5, streaming=True,
        )  # fmt: skip

        @tool
        async def lookup(question: str) -> str:
            """Answer a factual question with the company's language model."""
            messages = [("system", context.system_prompt), ("user", question)]
            return str((await llm.ainvoke(messages)).content)

        safe_lookup = guard_tool(lookup, certificate=certificate, handle_tool_error=True)
        for question in ["What is the chemical symbol for gold?",
                         "Which element has the atomic number 26?"]:  # fmt: skip
            result = await safe_lookup.ainvoke({"question": question})
            if "blocked by liftguard" in result:
                print(f"agent: I could not verify an answer to {question!r}.\n  tool: {result}\n")
            else:
                print(f"agent: {question} -> {result}\n")


if __name__ == "__main__":
    asyncio.run(main())
