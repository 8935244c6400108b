"""The caller's side of one tool call: its arguments, checked into one-line errors, and its connection, watched so
that a call whose caller has gone away is cancelled (design.md §5).

On a 2025-11-25 HTTP session the SDK keeps running a call whose POST stream has closed (the spec lets a client
resume such a stream; we keep no event store, so nothing can): the run, its children's calls and any approval wait
would go on until the server stops. `unless_caller_leaves` ends them as soon as the HTTP request is gone, the way
the SDK's own 2026-07-28 route does.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import anyio
import structlog
from mcp.server.mcpserver import Context
from pydantic import ValidationError
from starlette.requests import Request

log = structlog.get_logger("meta_agent.caller")
T = TypeVar("T")
GOT_SHOWN = 40  # characters of a rejected value quoted back; it is the caller's own data, kept short


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
    close = difflib.get_close_matches(unknown, known, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}?" if close else f"its arguments: {', '.join(known)}"
    return f"{_shown(unknown)}: unknown argument of {tool} ({hint})"


def argument_error(tool: str, exc: ValidationError) -> str:
    """The SDK's pydantic error about a call's arguments, as one line per problem (joined by "; "), each naming the
    argument: `task: required argument of agent, missing`, `max_steps: input should be a valid integer, got "x"`."""
    return "; ".join(_problem(tool, error) for error in exc.errors())


def _problem(tool: str, error: Any) -> str:
    path = _path(error["loc"])
    if error["type"] == "missing":
        return f"{path}: required argument of {tool}, missing"
    message = " ".join(str(error["msg"]).split())
    got = json.dumps(error["input"], default=str)
    if len(got) > GOT_SHOWN:
        got = got[: GOT_SHOWN - 3] + "..."
    return f"{path}: {message[:1].lower()}{message[1:]}, got {got}"


def _path(loc: tuple[int | str, ...]) -> str:
    """`tools[0]` for the first item of `tools`."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{_shown(part)}" if path else _shown(part))
    return path


def _shown(name: str) -> str:
    """An argument's name as the caller sent it, quoted unless it is a plain name: one line, whatever it holds."""
    return name if name.isidentifier() else repr(name)[:GOT_SHOWN]
