"""Our MCP server as an ASGI app: streamable HTTP at /mcp behind exact Host/Origin checks and, optionally, a static
bearer token or OAuth access tokens (front/auth/resource_server.py, with the protected resource metadata), the web
console at /ui behind the same checks and credentials (front/http/console.py), and /health. `front.http.serve`
serves it with uvicorn; an embedder may mount it in an app of its own.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import anyio
import structlog
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from meta_agent.errors import ConfigError, summary
from meta_agent.front.auth.resource_server import (
    SUBJECT_KEY,
    JwtVerifier,
    RequireJwt,
    ResourceServer,
    metadata_routes,
)
from meta_agent.front.auth.static_token import bearer_matches
from meta_agent.front.auth.subjects import STATIC_TOKEN_SUBJECT
from meta_agent.front.http.console import Console
from meta_agent.front.http.guard import LOOPBACK, Authority, HostGuard, allowed_authority
from meta_agent.front.server import MetaAgentServer
from meta_agent.version import __version__

log = structlog.get_logger(__name__)


def http_app(
    server: MetaAgentServer,
    *,
    host: str,
    token: str | None = None,
    allowed_hosts: tuple[str, ...] = (),
    auth: ResourceServer | None = None,
    ui_client_id: str | None = None,
) -> Starlette:
    """Streamable HTTP at /mcp with DNS-rebinding protection and an optional static bearer token or OAuth access
    tokens, and /health: whether the server is up for any Host (a probe names the server by its own address); the
    version and the children only for a Host and Origin the guard answers and, with a token or `auth` set, a caller
    whose bearer token /mcp would take. Up means serving, with the shared database in reach where there is one: 503
    while the latest transaction found it unreachable (no query of its own: the run index looks at the database every
    few seconds).

    Args:
        server: the server `build_server` made; the app's lifespan enters the server's, where the children start.
        host: the address served on; it is one of the `Host` values /mcp answers (with the loopback names).
        token: where given, /mcp needs `Authorization: Bearer <token>` (else 401).
        allowed_hosts: more `Host` values to answer: `H` allows any port, `H:PORT` that one.
        auth: where given, /mcp needs a bearer JWT of its issuer for its audience (else 401, or 403 for a scope
            missing), and its protected resource metadata is served at /.well-known/oauth-protected-resource.
        ui_client_id: with `auth`, the OAuth client id the web console signs its users in as (/ui/sign-in).

    Returns:
        An ASGI app to serve with uvicorn, or to mount in yours if your lifespan enters its lifespan. Its
        `state.console` is the web console (`console_of`).

    Raises:
        ConfigError: `host` or an allowed host is not a host[:port]; both `token` and `auth` given; `ui_client_id`
            without `auth`.
    """
    if token and auth:
        raise ConfigError("a static bearer token and OAuth access tokens at once: choose one of the two")
    if ui_client_id and not auth:
        raise ConfigError("META_AGENT_UI_CLIENT_ID is set without META_AGENT_AUTH_ISSUER")
    allowed = _allowed(host, allowed_hosts)
    # The SDK's own Host/Origin check matches "host:*" by prefix; HostGuard checks exactly instead.
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    mcp_app: ASGIApp = server.streamable_http_app(streamable_http_path="/mcp", transport_security=security)
    if token:
        mcp_app = _BearerToken(mcp_app, token)
    verifier = JwtVerifier(auth) if auth else None  # one for /mcp and /ui: the same checks, one key set
    jwt_gate = RequireJwt(mcp_app, verifier) if verifier else None
    guard = HostGuard(jwt_gate or mcp_app, allowed)
    console = Console(server, allowed=allowed, token=token, verifier=verifier, client_id=ui_client_id)

    async def shows_details(request: Request) -> bool:
        """Whether /health may say more than up or not: a Host the guard answers, and the bearer token /mcp takes."""
        given = dict(request.scope["headers"]).get(b"authorization", b"")
        if not guard.answers(request.scope):
            return False
        if jwt_gate is not None:
            return await jwt_gate.passes(given)
        return not token or bearer_matches(given, token)

    async def health(request: Request) -> JSONResponse:
        engine = server.engine
        if engine is None:
            return JSONResponse({"status": "starting"}, status_code=503)
        if not engine.runs.in_touch():
            return JSONResponse({"status": "database unreachable"}, status_code=503)
        if not await shows_details(request):
            return JSONResponse({"status": "ok"})  # up or not is all a load balancer needs; the rest is for callers
        statuses = [child.status for child in engine.pool]
        children = {status.name: status.state for status in statuses}
        # why each child that is not ready is not, as `meta-agent check` says it
        errors = {status.name: status.error for status in statuses if status.error and status.state != "ready"}
        problems = engine.toolbox.problems()  # servers.json or the trust file cannot be used
        body = {"status": "ok", "version": __version__, "children": children, "errors": errors, "problems": problems}
        return JSONResponse(body)

    metadata = metadata_routes(auth) if auth else []
    ui = [Route("/ui", console), Route("/ui/{rest:path}", console)]
    routes = [Route("/health", health), *metadata, *ui, Mount("/", app=guard)]
    app = Starlette(routes=routes, lifespan=partial(_lifespan, server))
    app.state.console = console
    return app


def console_of(app: Starlette) -> Console:
    """The web console of an app `http_app` made (for its sign-in link)."""
    console = app.state.console
    assert isinstance(console, Console)
    return console


@asynccontextmanager
async def _lifespan(server: MetaAgentServer, _app: Starlette) -> AsyncIterator[None]:
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


def _allowed(host: str, allowed_hosts: tuple[str, ...]) -> frozenset[Authority]:
    """The Host values /mcp answers: the address served on, the allowed hosts, the loopback names.

    Raises:
        ConfigError: one that is not a host[:port], named by its option.
    """
    allowed: set[Authority] = {Authority(name) for name in LOOPBACK}
    for option, value in [("--host", host), *(("--allowed-host", h) for h in allowed_hosts)]:
        try:
            allowed.add(allowed_authority(value))
        except ValueError as exc:
            raise ConfigError(f"{option}: {exc}") from None
    return frozenset(allowed)


def _leave(exc: BaseException) -> None:
    """The server's lifespan (the engine) died while serving: the process must not stay up serving nothing. Said in
    one line; then the process is stopped as by SIGTERM (its children are stopped already), so that its supervisor
    starts it again."""
    log.error("serving_failed", error=summary(exc))
    os.kill(os.getpid(), signal.SIGTERM)


class _BearerToken:
    """Requests without `Authorization: Bearer <token>` get 401; those with it are its holder's (one subject)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self._app = app
        self._expected = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        given = dict(scope["headers"]).get(b"authorization", b"") if scope["type"] == "http" else None
        if given is not None and not bearer_matches(given, self._expected):
            response = JSONResponse(
                {"error": "missing or wrong bearer token (META_AGENT_HTTP_TOKEN)"},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
            await response(scope, receive, send)
            return
        if given is not None:
            scope[SUBJECT_KEY] = STATIC_TOKEN_SUBJECT
        await self._app(scope, receive, send)
