"""Our MCP server as an ASGI app: streamable HTTP at /mcp behind exact Host/Origin checks and an optional bearer
token, and /health. `front.http` serves it with uvicorn; an embedder may mount it in an app of its own.
"""

from __future__ import annotations

import hmac
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import structlog
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from meta_agent.errors import ConfigError, summary
from meta_agent.front.http_guard import LOOPBACK, Authority, HostGuard, allowed_authority
from meta_agent.front.server import MetaAgentServer
from meta_agent.version import __version__

log = structlog.get_logger(__name__)


def http_app(
    server: MetaAgentServer, *, host: str, token: str | None = None, allowed_hosts: tuple[str, ...] = ()
) -> Starlette:
    """Streamable HTTP at /mcp with DNS-rebinding protection and an optional bearer token, and /health: whether the
    server is up for any Host (a probe names the server by its own address); the version and the children only for
    a Host and Origin the guard answers and, with a token set, a caller that gives it. Up means serving, with the
    shared database in reach where there is one: 503 while the latest transaction found it unreachable (no query of
    its own: the run index looks at the database every few seconds).

    Args:
        server: the server `build_server` made; the app's lifespan enters the server's, where the children start.
        host: the address served on; it is one of the `Host` values /mcp answers (with the loopback names).
        token: where given, /mcp needs `Authorization: Bearer <token>` (else 401).
        allowed_hosts: more `Host` values to answer: `H` allows any port, `H:PORT` that one.

    Returns:
        An ASGI app to serve with uvicorn, or to mount in yours if your lifespan enters its lifespan.

    Raises:
        ConfigError: `host` or an allowed host is not a host[:port].
    """
    allowed: set[Authority] = set()
    for option, value in [("--host", host), *(("--allowed-host", h) for h in allowed_hosts)]:
        try:
            allowed.add(allowed_authority(value))
        except ValueError as exc:
            raise ConfigError(f"{option}: {exc}") from None
    allowed.update(Authority(name) for name in LOOPBACK)
    # The SDK's own Host/Origin check matches "host:*" by prefix; HostGuard checks exactly instead.
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    mcp_app: ASGIApp = server.streamable_http_app(streamable_http_path="/mcp", transport_security=security)
    if token:
        mcp_app = _BearerToken(mcp_app, token)
    guard = HostGuard(mcp_app, frozenset(allowed))

    async def health(request: Request) -> JSONResponse:
        engine = server.engine
        if engine is None:
            return JSONResponse({"status": "starting"}, status_code=503)
        if not engine.runs.in_touch():
            return JSONResponse({"status": "database unreachable"}, status_code=503)
        given = dict(request.scope["headers"]).get(b"authorization", b"")
        if not guard.answers(request.scope) or (token and not _bearer_matches(given, token)):
            return JSONResponse({"status": "ok"})  # up or not is all a load balancer needs; the rest is for callers
        children = {child.name: child.status.state for child in engine.pool}
        return JSONResponse({"status": "ok", "version": __version__, "children": children})

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        serving = False
        try:
            async with server.session_manager.run():  # enters the server's own lifespan: the children start here
                serving = True
                yield
        except BaseException as exc:
            # the server failed to start (uvicorn says why and stops), or is stopped: as it came
            if not serving or isinstance(exc, (KeyboardInterrupt, SystemExit, anyio.get_cancelled_exc_class())):
                raise
            _leave(exc)

    return Starlette(routes=[Route("/health", health), Mount("/", app=guard)], lifespan=lifespan)


def _leave(exc: BaseException) -> None:
    """The server's lifespan (the engine) died while serving: the process must not stay up serving nothing. Said in
    one line; then the process is stopped as by SIGTERM (its children are stopped already), so that its supervisor
    starts it again."""
    log.error("serving_failed", error=summary(exc))
    os.kill(os.getpid(), signal.SIGTERM)


class _BearerToken:
    """Requests without `Authorization: Bearer <token>` get 401."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self._app = app
        self._expected = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        given = dict(scope["headers"]).get(b"authorization", b"") if scope["type"] == "http" else None
        if given is not None and not _bearer_matches(given, self._expected):
            response = JSONResponse(
                {"error": "missing or wrong bearer token (META_AGENT_HTTP_TOKEN)"},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
            await response(scope, receive, send)
            return
        await self._app(scope, receive, send)


def _bearer_matches(authorization: bytes, token: str) -> bool:
    """Whether an Authorization header is `Bearer <token>`: the scheme in any case (RFC 6750), the token compared
    in constant time."""
    scheme, _, given = authorization.partition(b" ")
    return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), token.encode())
