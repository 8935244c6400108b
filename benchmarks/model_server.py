"""An OpenAI-compatible model endpoint on 127.0.0.1 for benchmarks: each answer comes after `--delay` seconds; a
conversation with fewer than `--tool-turns` tool results gets a call of the first tool offered (echoing "hello"),
then a final answer that quotes the last tool result ("done: hello"), so a caller can check the tool really ran.

    python model_server.py --port 0 --delay 0.1 --tool-turns 2     (prints "PORT <n>" once it listens)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


def answer(body: dict, tool_turns: int) -> dict:
    messages = body["messages"]
    done = sum(1 for m in messages if m["role"] == "tool")
    message: dict = {"role": "assistant", "content": None}
    if done < tool_turns and body.get("tools"):
        name = body["tools"][0]["function"]["name"]
        call = {"id": f"call_{done}", "type": "function", "function": {"name": name, "arguments": '{"text": "hello"}'}}
        message["tool_calls"] = [call]
    else:
        results = [m for m in messages if m["role"] == "tool"]
        message["content"] = f"done: {_text(results[-1]['content'])}" if results else "done"
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", "bench"),
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if "tool_calls" in message else "stop"}
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def _text(content: str | list[dict]) -> str:
    """A tool message's text: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--tool-turns", type=int, default=1)
    args = parser.parse_args()

    async def chat(request: Request) -> JSONResponse:
        body = json.loads(await request.body())
        if args.delay:
            await asyncio.sleep(args.delay)
        return JSONResponse(answer(body, args.tool_turns))

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    sock = socket.socket()
    # Accepted connections inherit this: without it a response written in two parts waits 40 ms for an ACK.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(1024)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", backlog=1024))
    server.run(sockets=[sock])


if __name__ == "__main__":
    sys.exit(main())
