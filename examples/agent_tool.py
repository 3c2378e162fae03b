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

from _local import guard_settings, local_server
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from adapters import guard_tool


async def main() -> None:
    # LangChain logs every callback error before re-raising it; the example reports it
    logging.getLogger("langchain_core.callbacks.manager").setLevel(logging.CRITICAL)
    with local_server() as server:
        policy, tau, skeleton = guard_settings(server.model.vocab_size)
        llm = ChatOpenAI(
            base_url=server.base_url, api_key="local", model="smollm2",
            logprobs=True, top_logprobs=5, streaming=True,
        )  # fmt: skip

        @tool
        async def lookup(question: str) -> str:
            """Answer a factual question with the company's language model."""
            return str((await llm.ainvoke(question)).content)

        safe_lookup = guard_tool(lookup, policy, tau, skeleton=skeleton, handle_tool_error=True)
        for question in ["What is the chemical symbol for gold?",
                         "Which element has the atomic number 26?"]:  # fmt: skip
            result = await safe_lookup.ainvoke({"question": question})
            if "blocked by liftguard" in result:
                print(f"agent: I could not verify an answer to {question!r}.\n  tool: {result}\n")
            else:
                print(f"agent: {question} -> {result}\n")


if __name__ == "__main__":
    asyncio.run(main())
