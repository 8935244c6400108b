"""The host's trace context over HTTP: a request's `traceparent` header, where its `_meta` carries none.

The MCP SDK's own middleware starts each request's SERVER span under the `traceparent` of the request's `_meta`, else
under the current context. This middleware, ahead of it, makes the HTTP request's W3C headers that current context,
so a host that traces its HTTP requests, not its MCP messages, still parents the request, and the run it starts. A
malformed header is ignored: the request starts a trace of its own.
"""

from __future__ import annotations

from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import Server
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from starlette.requests import Request

HEADERS = ("traceparent", "tracestate")


async def from_http_headers(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Run the request in the trace its HTTP headers name, unless its `_meta` names one."""
    request = ctx.request
    if not isinstance(request, Request) or (ctx.meta and "traceparent" in ctx.meta):
        return await call_next(ctx)
    carrier = {name: value for name in HEADERS if (value := request.headers.get(name)) is not None}
    if "traceparent" not in carrier:
        return await call_next(ctx)
    extracted = propagate.extract(carrier)
    if not trace.get_current_span(extracted).get_span_context().is_valid:
        return await call_next(ctx)
    token = otel_context.attach(extracted)
    try:
        return await call_next(ctx)
    finally:
        otel_context.detach(token)


def install(server: Server[Any]) -> None:
    """Put the middleware first, ahead of the SDK's span."""
    server.middleware.insert(0, from_http_headers)
