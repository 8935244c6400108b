"""The floor of the concurrency burst: a bare MCPServer of the SDK over streamable HTTP whose `agent` tool does what
one of meta-agent's runs in that burst does, with the same libraries and nothing else. Its model turns go through
the openai SDK (the same `post` of a wire-form body, over the SDK's aiohttp transport), and each tool call the model
asks for goes to the echo child through one SDK `Client` over stdio. No trust, records, progress, limits or events.

    python bare_agent.py --port N --base-url URL [--workers 2]

With `--workers` above 1, uvicorn serves from that many processes, each with its own child; the server is then
sessionless (`stateless_http`), since a session's requests may reach any of them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

import openai
import uvicorn
from common import ECHO_ENTRY
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.server import MCPServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

server = MCPServer("bare-agent")
logging.getLogger().setLevel(logging.WARNING)  # MCPServer sets up a handler at INFO: a line per model request
parts: dict[str, Any] = {}


@server.tool()
async def agent(task: str, tools: list[str]) -> dict[str, Any]:
    """Run the task: model turns, each tool call the model asks for sent to the echo child."""
    child: Client = parts["child"]
    model: openai.AsyncOpenAI = parts["model"]
    offered = [
        {"type": "function", "function": {"name": "echo_echo", "description": "Echo", "parameters": parts["schema"]}}
    ]
    messages: list[dict[str, Any]] = [{"role": "system", "content": "An agent."}, {"role": "user", "content": task}]
    turns = 0
    while True:
        turns += 1
        body = {"model": "bench", "messages": messages, "tools": offered}
        answer: Any = await model.post("/chat/completions", body=body, cast_to=object)
        message = answer["choices"][0]["message"]
        if not message.get("tool_calls"):
            return {"answer": message["content"], "stop_reason": "final", "usage": {"model_calls": turns}}
        messages.append(message)
        for call in message["tool_calls"]:
            result = await child.call_tool("echo", json.loads(call["function"]["arguments"]))
            text = "".join(block.text for block in result.content if block.type == "text")
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": text})


def build() -> Starlette:
    """The app of one process: its own child and model client, opened for the app's lifetime."""
    stateless = int(os.environ["BARE_AGENT_WORKERS"]) > 1
    mcp_app = server.streamable_http_app(streamable_http_path="/mcp", stateless_http=stateless)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        params = StdioServerParameters(command=ECHO_ENTRY["command"], args=ECHO_ENTRY["args"])
        async with Client(stdio_client(params)) as child, server.session_manager.run():
            parts["child"] = child
            parts["schema"] = next(t.input_schema for t in (await child.list_tools()).tools if t.name == "echo")
            http = openai.DefaultAioHttpClient()
            parts["model"] = openai.AsyncOpenAI(
                api_key="bench", base_url=os.environ["BARE_AGENT_BASE_URL"], http_client=http
            )
            yield

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    return Starlette(routes=[Route("/health", health), Mount("/", app=mcp_app)], lifespan=lifespan)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    # what build() reads, in this process and in each worker uvicorn starts
    os.environ |= {"BARE_AGENT_BASE_URL": args.base_url, "BARE_AGENT_WORKERS": str(args.workers)}
    app = "bare_agent:build" if args.workers > 1 else build()
    uvicorn.run(
        app, factory=args.workers > 1, workers=args.workers, host="127.0.0.1", port=args.port, log_level="warning"
    )


if __name__ == "__main__":
    main()
