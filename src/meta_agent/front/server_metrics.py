"""mcp.server.operation.duration: a middleware of the MCP server that times each request it answers
(records/metrics.py records it; a no-op until an OpenTelemetry SDK is set up)."""

from __future__ import annotations

import time
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp_types import METHOD_NOT_FOUND
from mcp_types.methods import SPEC_CLIENT_NOTIFICATION_METHODS

from meta_agent.records.metrics import OTHER, error_type, is_tool_error, record_server_operation


async def time_each_request(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Answer the request, then record how long that took, with error.type when it failed (a JSON-RPC error's
    code, an exception's class, or tool_error for a tool's error result)."""
    started = time.monotonic()
    try:
        result = await call_next(ctx)
    except BaseException as exc:
        failure = error_type(exc)
        record_server_operation(_method(ctx, failure), time.monotonic() - started, failure)
        raise
    error = "tool_error" if ctx.method == "tools/call" and is_tool_error(result) else None
    record_server_operation(_method(ctx, error), time.monotonic() - started, error)
    return result


def _method(ctx: ServerRequestContext[Any, Any], error: str | None) -> str:
    """The method as the metric names it: a request the server has no handler for, or a notification the
    specification does not name, is OTHER, so a host's made-up names are one series, not one each."""
    if ctx.request_id is None:
        return ctx.method if ctx.method in SPEC_CLIENT_NOTIFICATION_METHODS else OTHER
    return OTHER if error == str(METHOD_NOT_FOUND) else ctx.method
