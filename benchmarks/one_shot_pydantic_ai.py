"""The one-shot task with pydantic-ai: its agent, its OpenAI Chat Completions model at OPENAI_BASE_URL, the echo
child through its MCP toolset; prints the final answer."""

import os
import sys

from common import ECHO
from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

if __name__ == "__main__":
    provider = OpenAIProvider(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"])
    echo = MCPToolset(StdioTransport(command=sys.executable, args=[str(ECHO)]))
    agent = Agent(OpenAIChatModel("bench", provider=provider), toolsets=[echo])
    print(agent.run_sync("Echo hello.").output)
