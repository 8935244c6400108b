"""What guards a host's call of one of our tools: the name it calls (a tool, prompt or resource this caller is not
offered is the JSON-RPC error the spec says, -32602), its arguments, checked into one-line errors, and the host's
connection, watched so that a call whose caller has gone away is cancelled.

On a 2025-11-25 HTTP session the SDK keeps running a call whose POST stream has closed (the spec lets a client
resume such a stream; we keep no event store, so nothing can): the run, its children's calls and any approval wait
would go on until the server stops. `unless_caller_leaves` ends them as soon as the HTTP request is gone, the way
the SDK's own 2026-07-28 route does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, TypeVar

import anyio
import mcp.types as t
import structlog
from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError
from starlette.requests import Request

from meta_agent.shared.text import one_line
from meta_agent.shared.validation import did_you_mean, json_path, refusals

log = structlog.get_logger(__name__)
T = TypeVar("T")
NAME_CHARS = 200  # of a name the caller gave, said back in an error: a tool's or a prompt's is far shorter


def unknown(kind: Literal["tool", "prompt", "resource"], name: str) -> MCPError:
    """What a request naming a `kind` this caller is not offered gets: the protocol error -32602 (invalid params),
    `Unknown tool: NAME`, the same whether it does not exist or is hidden from this caller (the apps' tools)."""
    return MCPError(t.INVALID_PARAMS, f"Unknown {kind}: {one_line(name, NAME_CHARS)}")


async def unless_caller_leaves(context: Context | None, call: Callable[[], Awaitable[T]]) -> T | None:
    """`call()`, cancelled when the caller's HTTP request ends before it does; None then.

    Outside HTTP (stdio, in memory) the SDK itself ends a call whose caller has gone: `call()` runs as it is.
    Exceptions of `call()` propagate unchanged.
    """
    request = context.request_context.request if context is not None else None
    if not isinstance(request, Request):
        return await call()
    outcome = None
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_when_gone, request, tg.cancel_scope)
            outcome = await call()
            tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:  # only `call()` raises here; the task group wrapped it
        # with its own cause (a ToolError's ValidationError) and traceback, which `from` would replace
        raise group.exceptions[0]  # noqa: B904
    return outcome


async def _cancel_when_gone(request: Request, scope: anyio.CancelScope) -> None:
    # The body has been read, so the next ASGI message is the disconnect. Uvicorn hands it to every receiver, so
    # this may wait beside the SSE response's own listener (the SDK's 2026-07-28 route watches the same way); a
    # middleware in front of /mcp must pass `receive` through as it is.
    while (await request.receive())["type"] != "http.disconnect":
        pass
    log.info("caller_gone", path=request.url.path)
    scope.cancel()


def unknown_argument(tool: str, arguments: Mapping[str, Any], schema: Mapping[str, Any]) -> str | None:
    """One line naming the first argument `schema` does not declare, with a did-you-mean; None if there is none."""
    known = list(schema.get("properties", {}))
    unknown = next((name for name in arguments if name not in known), None)
    if unknown is None:
        return None
    return f"{json_path([unknown])}: unknown argument of {tool}{did_you_mean(unknown, known, 'its arguments')}"


def argument_error(tool: str, exc: ValidationError) -> str:
    """The SDK's pydantic error about a call's arguments, as one line per problem (joined by "; "), each naming the
    argument: `task: required argument of agent is missing`, `tools: expected a list, got "x"`."""
    return "; ".join(refusals(exc, noun=f"argument of {tool}"))
