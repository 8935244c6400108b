"""The web console on the HTTP transport, at /ui: the runs list (`/ui`), a run (`/ui/runs/RUN_ID`) and the tool
selector (`/ui/tools`), the pages of meta_agent.apps.pages as ordinary pages, which find their data through
`POST /ui/api/call` (the app-only tools, front/http/console_calls.py); `/ui/sign-in` and `/ui/callback` sign in.

Who may use it is who may use /mcp, with the same subject (front/http/console_auth.py, front/http/console_oauth.py);
without credentials, a page sends the browser to /ui/sign-in and the API answers 401. The Host/Origin guard of /mcp
stands in front of it (DNS rebinding).

Every answer carries `X-Content-Type-Options: nosniff`, `Referrer-Policy: no-referrer` (a sign-in link's code never
leaves in a Referer), `Cache-Control: no-store` and a Content-Security-Policy: a page's allows exactly its own inline
script and style (by hash), images of `data:`, and requests to its own origin; everything else none.

Writes go through the API only, which takes JSON only (`Content-Type: application/json`, which a cross-site form
cannot send) with the header `X-Meta-Agent-UI: 1` (which a cross-site request cannot send without a CORS preflight,
which is never granted); a request its session cookie vouches for must also come from our own origin (`Origin`, or
`Sec-Fetch-Site: same-origin`). The API reads at most MAX_BODY bytes, serves at most MAX_CALLS calls at once (more
are refused at once, 503), and its reads share the views' own limiter (front/apps/views.py).
"""

from __future__ import annotations

import json
import re
from typing import Any

import structlog
from starlette.datastructures import MutableHeaders
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route, Router
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from meta_agent.apps.pages import View, inline_hashes, page
from meta_agent.front.apps.views import Caller
from meta_agent.front.auth.resource_server import JwtVerifier
from meta_agent.front.auth.subjects import subject_of
from meta_agent.front.http.console_auth import ConsoleAuth, Refused, notice, over_https
from meta_agent.front.http.console_calls import TOOLS, call_tool
from meta_agent.front.http.console_oauth import OAuthSignIn
from meta_agent.front.http.guard import Authority, HostGuard
from meta_agent.front.server import MetaAgentServer
from meta_agent.shared.text import one_line
from meta_agent.store.database import LOCAL_OWNER

log = structlog.get_logger(__name__)

MAX_BODY = 1024 * 1024  # bytes of an API call's body; its largest argument, a task, is 100,000 characters
MAX_CALLS = 32  # API calls served at once per process: four times the views' readers (front/apps/views.py)
UI_HEADER = "x-meta-agent-ui"
RUN_ID = re.compile(r"[0-9A-Z]{26}")
PAGE_POLICY = (
    "default-src 'none'; script-src {script}; style-src {style}; img-src data:; connect-src 'self';"
    " base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
OTHER_POLICY = "default-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
HEADERS = (
    ("content-security-policy", OTHER_POLICY),  # where the answer set none of its own
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("cache-control", "no-store"),
)
STATIC_SIGN_IN = (
    "Open the sign-in link that `meta-agent serve` wrote on its standard error when it started (it works once,"
    " within 10 minutes; start the server again for a new one), or send the `Authorization: Bearer` header /mcp takes"
    " (META_AGENT_HTTP_TOKEN)."
)
NO_CLIENT = (
    "To sign in here with your identity provider, register a public client (authorization code with PKCE) whose"
    " redirect URI is this server's /ui/callback, and set META_AGENT_UI_CLIENT_ID to its client id. Meanwhile, send"
    " the `Authorization: Bearer` header /mcp takes."
)


class Console:
    """The console's ASGI app, for the paths under /ui (front/http/app.py routes them here)."""

    def __init__(
        self,
        server: MetaAgentServer,
        *,
        allowed: frozenset[Authority],
        token: str | None,
        verifier: JwtVerifier | None,
        client_id: str | None,
    ) -> None:
        self.server = server
        self.auth = ConsoleAuth(token=token, verifier=verifier)
        self.oauth = OAuthSignIn(self.auth, client_id) if verifier is not None and client_id else None
        self._calls = 0
        router = Router(
            [
                Route("/ui", self._runs_page),
                Route("/ui/", lambda _request: RedirectResponse("/ui", status_code=308)),
                Route("/ui/tools", self._tools_page),
                Route("/ui/runs/{run_id}", self._run_page),
                Route("/ui/api/call", self._call, methods=["POST"]),
                Route("/ui/sign-in", self._sign_in),
                Route("/ui/callback", self._callback),
            ],
            redirect_slashes=False,
            default=_not_found,
        )
        self._app = _Hardened(HostGuard(router, allowed))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":  # the console speaks no WebSocket: closed before it is accepted
            await send({"type": "websocket.close", "code": 1008})
            return
        await self._app(scope, receive, send)

    def sign_in_link(self, base_url: str) -> str | None:
        """A one-time sign-in link at `base_url` (`http://HOST:PORT`) for the static token's holder; None when the
        console signs in otherwise (OAuth) or needs no sign-in."""
        if self.auth.token is None:
            return None
        return f"{base_url}/ui/sign-in?code={self.auth.codes.new()}"

    async def _runs_page(self, request: Request) -> Response:
        return await self._page(request, "runs")

    async def _tools_page(self, request: Request) -> Response:
        return await self._page(request, "tools")

    async def _run_page(self, request: Request) -> Response:
        if not RUN_ID.fullmatch(request.path_params["run_id"]):
            return notice(404, "Not found", "no such run: a run id is 26 characters of 0-9 and A-Z")
        return await self._page(request, "run")

    async def _page(self, request: Request, view: View) -> Response:
        try:
            await self.auth.admit(request)
        except Refused as exc:
            if exc.status == 401:
                return RedirectResponse("/ui/sign-in", status_code=303)
            return notice(exc.status, "Not allowed", exc.line)
        script, style = inline_hashes(view)
        policy = PAGE_POLICY.format(script=script, style=style)
        return HTMLResponse(page(view), headers={"Content-Security-Policy": policy})

    async def _call(self, request: Request) -> Response:
        problem = _not_json(request)
        if problem is not None:
            return _error(403, problem)
        try:
            admitted = await self.auth.admit(request)
        except Refused as exc:
            return _error(exc.status, exc.line, {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None)
        problem = _foreign(request, by_cookie=admitted.by_cookie)
        if problem is not None:
            log.warning("console_call_refused", reason=problem)
            return _error(403, problem)
        if self._calls >= MAX_CALLS:
            return _error(503, f"{MAX_CALLS} console calls are being served already: try again", {"Retry-After": "1"})
        self._calls += 1
        try:
            return await self._answer(request)
        finally:
            self._calls -= 1

    async def _answer(self, request: Request) -> Response:
        body = await _body(request)
        if isinstance(body, Response):
            return body
        try:
            call = json.loads(body)
        except (ValueError, RecursionError):
            return _error(400, "the body is not JSON")
        if not isinstance(call, dict) or set(call) - {"name", "arguments"} or not isinstance(call.get("name"), str):
            return _error(400, 'the body must be {"name": "app_…", "arguments": {…}}')
        name, arguments = call["name"], call.get("arguments", {})
        if name not in TOOLS:
            return _error(404, f"unknown tool {one_line(repr(name), 60)} (the console calls {', '.join(TOOLS)})")
        if not isinstance(arguments, dict):
            return _error(400, "arguments: expected an object")
        front = self.server.front
        if front is None:
            return _error(503, "the server is starting or stopping: try again")
        owner = subject_of(request, LOCAL_OWNER)
        result = await call_tool(front.views, Caller(owner=owner, connection=owner), name, arguments)
        return _json(result.model_dump(mode="json", by_alias=True, exclude_none=True), 200)

    async def _sign_in(self, request: Request) -> Response:
        if self.auth.open:
            return RedirectResponse("/ui", status_code=303)
        if self.auth.token is not None:
            code = request.query_params.get("code")
            if code is None:
                return notice(200, "Sign in to meta-agent", STATIC_SIGN_IN)
            if not self.auth.codes.redeem(code):
                log.warning("console_sign_in_refused", reason="a wrong, used or expired code")
                return notice(403, "Sign-in refused", "this sign-in link is wrong, used or expired: " + STATIC_SIGN_IN)
            log.info("console_signed_in", subject="token")
            response = RedirectResponse("/ui", status_code=303)
            self.auth.start_session(response, secure=over_https(request))
            return response
        if self.oauth is None:
            return notice(200, "Sign in to meta-agent", NO_CLIENT)
        return await self.oauth.start(request)

    async def _callback(self, request: Request) -> Response:
        if self.oauth is None:
            return notice(404, "Not found", "no console page at /ui/callback (it serves OAuth sign-ins only)")
        return await self.oauth.finish(request)


async def _not_found(scope: Scope, receive: Receive, send: Send) -> None:
    path = one_line(scope.get("path", ""), 100)
    if path.startswith("/ui/api/"):
        await _error(404, f"no such console API: {path}")(scope, receive, send)
    else:
        await notice(404, "Not found", f"no console page at {path}")(scope, receive, send)


def _not_json(request: Request) -> str | None:
    """Why a call is not one our pages could have made (None if it could): the header they send, JSON."""
    if request.headers.get(UI_HEADER) != "1":
        return "the X-Meta-Agent-UI: 1 header is required (the console's pages send it)"
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media != "application/json":
        return "the Content-Type must be application/json"
    return None


def _foreign(request: Request, *, by_cookie: bool) -> str | None:
    """Why a call may come from another site's page (None if it cannot): an Origin that is not the request's own
    Host (the guard has already refused one it does not answer to), or a cookie-borne call that shows no origin."""
    origins = request.headers.getlist("origin")
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return f"a call from another site ({one_line(fetch_site, 20)})"
    if origins:
        scheme, _, authority = origins[0].lower().partition("://")
        if len(origins) > 1 or scheme not in ("http", "https") or authority != request.headers.get("host", "").lower():
            return "the Origin is not this server's own"
        return None
    if by_cookie and fetch_site != "same-origin":
        return "a call signed in by cookie must show its Origin (or Sec-Fetch-Site: same-origin)"
    return None


async def _body(request: Request) -> bytes | Response:
    """The request's body, or the answer refusing it (too long, or never sent whole)."""
    announced = request.headers.get("content-length", "")
    if announced.isdigit() and int(announced) > MAX_BODY:
        return _error(413, f"the body is longer than {MAX_BODY:,} bytes")
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY:
                return _error(413, f"the body is longer than {MAX_BODY:,} bytes")
    except ClientDisconnect:
        return _error(400, "the body did not arrive whole")
    return bytes(body)


def _json(data: Any, status: int, headers: dict[str, str] | None = None) -> Response:
    # ASCII: a lone surrogate in a caller's own text is escaped, not a failure to encode the answer
    text = json.dumps(data, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return Response(text, status_code=status, headers=headers, media_type="application/json")


def _error(status: int, line: str, headers: dict[str, str] | None = None) -> Response:
    return _json({"error": line}, status, headers)


class _Hardened:
    """Adds the console's headers (HEADERS) to every answer that has not set its own."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return

        async def hardened(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", []))
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS:
                    if name not in headers:
                        headers[name] = value
            await send(message)

        await self._app(scope, receive, hardened)
