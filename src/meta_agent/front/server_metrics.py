"""mcp.server.operation.duration: a middleware of the MCP server that times each request it answers
(records/metrics.py records it; a no-op until an OpenTelemetry SDK is set up)."""

from __future__ import annotations

import time
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext

from meta_agent.records.metrics import error_type, is_tool_error, record_server_operation


async def time_each_request(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Answer the request, then record how long that took, with error.type when it failed (a JSON-RPC error's
    code, an exception's class, or tool_error for a tool's error result)."""
    started = time.monotonic()
    try:
        result = await call_next(ctx)
    except BaseException as exc:
        record_server_operation(ctx.method, time.monotonic() - started, error_type(exc))
        raise
    error = "tool_error" if ctx.method == "tools/call" and is_tool_error(result) else None
    record_server_operation(ctx.method, time.monotonic() - started, error)
    return result
