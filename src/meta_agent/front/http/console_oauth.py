"""Signing in to the web console with the OAuth issuer /mcp trusts (META_AGENT_AUTH_ISSUER), as the public client
META_AGENT_UI_CLIENT_ID: the authorization code flow with PKCE (S256, RFC 7636).

`/ui/sign-in` sends the browser to the issuer's `authorization_endpoint` (found in its metadata, RFC 8414) with
`redirect_uri` = the request's own origin + `/ui/callback`, `resource` = /mcp's URL (RFC 8707: the audience /mcp
checks), the scopes /mcp requires and a random `state`; the state, the PKCE verifier and the redirect URI wait in a
short-lived signed HttpOnly cookie. `/ui/callback` checks the state, trades the code for an access token at the
`token_endpoint` (a form POST, bounded in time and size), checks the token with the very verifier of /mcp, and keeps
it in the session cookie (front/http/console_auth.py).

The cookies' SameSite: the flow cookie is Lax, because the browser comes back to /ui/callback from the issuer's site,
a cross-site navigation that a Strict cookie would not be sent with. The session cookie is Strict, so that no other
site's page can make a request that carries it; for the same reason it is not followed by an HTTP redirect (the
navigation that came from the issuer would count as cross-site through it, and the new cookie would be left out of
the first page): the callback answers with a page that sends the browser on to /ui itself.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import time
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import anyio
import httpx2
import structlog
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from meta_agent.front.auth.jwks import FETCH_TIME_LIMIT, KeySetUnavailable, bounded_body, checked_url, issuer_metadata
from meta_agent.front.auth.resource_server import ResourceServer
from meta_agent.front.http.console_auth import (
    MAX_COOKIE_CHARS,
    SESSION_COOKIE,
    SESSION_SECONDS,
    ConsoleAuth,
    Refused,
    Signer,
    notice,
    over_https,
    set_cookie,
)
from meta_agent.shared.text import one_line

log = structlog.get_logger(__name__)

FLOW_COOKIE = "meta_agent_ui_flow"
FLOW_SECONDS = 600  # a sign-in at the issuer is finished within this, or started again
METADATA_SECONDS = 3600.0  # the issuer's endpoints are looked up again after this
EXCHANGE_SECONDS = 10.0  # the token endpoint answers within this, whole
MAX_CODE_CHARS = 4096  # an authorization code is opaque, and short; one longer than this is not sent on
SIGN_IN_AGAIN = "/ui/sign-in"


class SignInFailed(Exception):
    """The sign-in cannot go on: one line for the page."""


class OAuthSignIn:
    """The sign-in flow of the console's public client `client_id` at the issuer of `auth`'s verifier."""

    def __init__(self, auth: ConsoleAuth, client_id: str) -> None:
        assert auth.verifier is not None
        self._auth = auth
        self._resource: ResourceServer = auth.verifier.resource
        self._client_id = client_id
        # The flow cookie's key lives with the process: a sign-in is finished where it began (there is no secret to
        # share in this mode; the state and PKCE, not this signature, are what hold off a forged callback).
        self._signer = Signer(os.urandom(32))
        self._endpoints: tuple[float, str, str] | None = None
        self._lock = anyio.Lock()

    async def start(self, request: Request) -> Response:
        """A redirect to the issuer's authorization endpoint, the flow cookie set."""
        try:
            authorize, _ = await self._issuer_endpoints()
        except SignInFailed as exc:
            return notice(502, "Cannot sign in", str(exc), link=SIGN_IN_AGAIN)
        verifier = secrets.token_urlsafe(64)
        state = secrets.token_urlsafe(32)
        redirect_uri = f"{request.url.scheme}://{request.headers['host']}/ui/callback"
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        query = {
            "response_type": "code",
            "client_id": self._client_id,
            "redirect_uri": redirect_uri,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "state": state,
            "resource": self._resource.audience,
            **({"scope": " ".join(self._resource.scopes)} if self._resource.scopes else {}),
        }
        response = RedirectResponse(_with_query(authorize, query), status_code=303)
        flow = self._signer.seal({"state": state, "verifier": verifier, "redirect_uri": redirect_uri}, FLOW_SECONDS)
        set_cookie(response, FLOW_COOKIE, flow, max_age=FLOW_SECONDS, secure=over_https(request), same_site="lax")
        return response

    async def finish(self, request: Request) -> Response:
        """The issuer sent the browser back: the session cookie set from the token the code is traded for. A
        callback that is not this browser's sign-in (no flow cookie, another state) leaves its sign-in as it is."""
        try:
            flow = self._flow_of(request)
        except SignInFailed as exc:
            log.info("console_sign_in_refused", reason=str(exc))
            return notice(403, "Sign-in refused", str(exc), link=SIGN_IN_AGAIN)
        try:
            token, expires_at = await self._token_of(request, flow)
        except SignInFailed as exc:
            log.info("console_sign_in_refused", reason=str(exc))
            response = notice(403, "Sign-in refused", str(exc), link=SIGN_IN_AGAIN)
        else:
            response = notice(200, "Signed in", "Signed in: on to the console.", link="/ui", refresh="/ui")
            seconds = max(1, min(SESSION_SECONDS, expires_at - int(time.time())))
            set_cookie(response, SESSION_COOKIE, token, max_age=seconds, secure=over_https(request), same_site="strict")
        response.delete_cookie(FLOW_COOKIE, path="/ui", secure=over_https(request), httponly=True, samesite="lax")
        return response

    def _flow_of(self, request: Request) -> dict[str, Any]:
        """The sign-in this browser started, whose state the callback gives back.

        Raises:
            SignInFailed: there is none (or it expired), or the state is another.
        """
        flow = self._signer.open(request.cookies.get(FLOW_COOKIE, ""))
        if flow is None:
            raise SignInFailed("this sign-in was not started here, or took more than 10 minutes: sign in again")
        if not hmac.compare_digest(request.query_params.get("state", "").encode(), str(flow.get("state")).encode()):
            raise SignInFailed("the sign-in's state does not match this browser's: sign in again")
        return flow

    async def _token_of(self, request: Request, flow: dict[str, Any]) -> tuple[str, int]:
        """The access token of the callback's code, checked as /mcp checks it, and when it expires.

        Raises:
            SignInFailed: the issuer refused, or the token does not pass.
        """
        query = request.query_params
        if "error" in query:
            raise SignInFailed(f"the issuer refused the sign-in: {one_line(query['error'], 100)}")
        code = query.get("code", "")
        if not code or len(code) > MAX_CODE_CHARS:
            raise SignInFailed("the issuer sent no authorization code")
        _, token_endpoint = await self._issuer_endpoints()
        token = await self._exchange(token_endpoint, code, flow)
        if len(SESSION_COOKIE) + len(token) > MAX_COOKIE_CHARS:
            raise SignInFailed(f"the access token ({len(token):,} characters) is too long for a cookie")
        try:
            access = await self._auth.verified(None, token)
        except Refused as exc:
            raise SignInFailed(f"the issuer's token does not pass /mcp's checks: {exc.line}") from None
        log.info("console_signed_in", issuer=self._resource.issuer)
        return token, access.expires_at or int(time.time()) + SESSION_SECONDS

    async def _exchange(self, endpoint: str, code: str, flow: dict[str, Any]) -> str:
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": str(flow.get("redirect_uri", "")),
            "client_id": self._client_id,
            "code_verifier": str(flow.get("verifier", "")),
            "resource": self._resource.audience,
        }
        try:
            with anyio.fail_after(EXCHANGE_SECONDS):
                async with (
                    httpx2.AsyncClient(timeout=EXCHANGE_SECONDS, follow_redirects=False) as http,
                    http.stream("POST", endpoint, data=form, headers={"Accept": "application/json"}) as response,
                ):
                    status = response.status_code
                    body = await bounded_body(response, endpoint)
        except TimeoutError:
            raise SignInFailed(f"the token endpoint did not answer within {EXCHANGE_SECONDS:g} s") from None
        except (httpx2.HTTPError, httpx2.InvalidURL, httpx2.StreamError, KeySetUnavailable) as exc:
            raise SignInFailed(f"the token endpoint failed: {one_line(str(exc), 200)}") from None
        try:
            answer = json.loads(body)
        except (ValueError, RecursionError):
            answer = None
        if not isinstance(answer, dict):
            raise SignInFailed(f"the token endpoint answered HTTP {status} without a JSON object")
        if status != 200 or not isinstance(answer.get("access_token"), str):
            error = answer.get("error")
            said = one_line(error, 100) if isinstance(error, str) else "no access_token"
            raise SignInFailed(f"the token endpoint answered HTTP {status}: {said}")
        kind = answer.get("token_type", "Bearer")
        if not isinstance(kind, str) or kind.lower() != "bearer":
            raise SignInFailed("the token endpoint answered a token that is not a bearer token")
        token: str = answer["access_token"]
        return token

    async def _issuer_endpoints(self) -> tuple[str, str]:
        """The issuer's authorization and token endpoints, from its metadata (looked up again after an hour).

        Raises:
            SignInFailed: the metadata cannot be had, or does not name both as usable URLs.
        """
        async with self._lock:
            held = self._endpoints
            if held is not None and time.monotonic() - held[0] < METADATA_SECONDS:
                return held[1], held[2]
            try:
                with anyio.fail_after(2 * FETCH_TIME_LIMIT):
                    url, metadata = await issuer_metadata(self._resource.issuer)
            except TimeoutError:
                raise SignInFailed("the issuer's metadata did not come in time") from None
            except KeySetUnavailable as exc:
                raise SignInFailed(f"cannot read the issuer's metadata: {one_line(str(exc), 300)}") from None
            authorize = _endpoint(metadata, "authorization_endpoint", url)
            token = _endpoint(metadata, "token_endpoint", url)
            self._endpoints = (time.monotonic(), authorize, token)
            return authorize, token


def _endpoint(metadata: dict[str, Any], name: str, url: str) -> str:
    """An endpoint the metadata names: https (or http to this machine), a query allowed, no fragment."""
    value = metadata.get(name)
    if not isinstance(value, str):
        raise SignInFailed(f"{url} names no {name}")
    parts = urlsplit(value)
    try:
        checked_url(urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")), f"{name}:")
    except ValueError as exc:
        raise SignInFailed(f"{url}: {exc}") from None
    if parts.fragment or "#" in value:
        raise SignInFailed(f"{url}: {name} has a fragment")
    return value


def _with_query(url: str, query: dict[str, str]) -> str:
    return f"{url}{'&' if urlsplit(url).query else '?'}{urlencode(query)}"
