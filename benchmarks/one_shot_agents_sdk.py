"""The one-shot task with the OpenAI Agents SDK: its agent and runner, a Chat Completions model at OPENAI_BASE_URL,
the echo child over its `MCPServerStdio`; prints the final answer. Its tracing, which would export to OpenAI's
servers, is switched off: nothing here can reach them."""

import asyncio
import sys

from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from agents.mcp import MCPServerStdio
from common import ECHO
from openai import AsyncOpenAI


async def main() -> None:
    set_tracing_disabled(True)
    async with MCPServerStdio({"command": sys.executable, "args": [str(ECHO)]}, cache_tools_list=True) as echo:
        model = OpenAIChatCompletionsModel("bench", AsyncOpenAI())  # OPENAI_BASE_URL and OPENAI_API_KEY
        agent = Agent(name="one-shot", model=model, mcp_servers=[echo])
        result = await Runner.run(agent, "Echo hello.")
    print(result.final_output)


if __name__ == "__main__":
    asyncio.run(main())
