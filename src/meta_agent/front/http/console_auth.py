"""Who a request to the web console (front/http/console.py) comes from. The console takes the credentials /mcp takes,
and gives them the same subject (front/auth/subjects.py), so that a user's console shows the runs and choices they
made through MCP:

- `Authorization: Bearer` with META_AGENT_HTTP_TOKEN (the subject `token`), or with an OAuth access token that the
  very `JwtVerifier` of /mcp checks, with the scopes /mcp requires (the subject `ISSUER#SUB`);
- or the console's session cookie, which stands for one of them. With the static token, a value signed with
  HMAC-SHA256 under a key derived from the token (front/auth/static_token.py) saying `{"sub": "token", "exp": ...}`
  (12 hours): every replica and every restart with the same token takes it, a changed token voids it, and nobody
  without the token can make one. It is set through a one-time sign-in link (`SignInCodes`: 256 random bits, taken
  once, within 10 minutes, kept in this process's memory). With OAuth, the cookie holds the access token itself
  (front/http/console_oauth.py signs in), checked on every request exactly as a bearer token is, expiry included.

Where /mcp needs no credentials (no token, no issuer), the console is open as /mcp is.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
import json
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from mcp.server.auth.provider import AccessToken
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from meta_agent.front.auth.resource_server import MAX_TOKEN_CHARS, JwtVerifier, TokenRefused
from meta_agent.front.auth.static_token import bearer_matches, session_key
from meta_agent.front.auth.subjects import SCOPE_KEY, STATIC_TOKEN_SUBJECT

SESSION_COOKIE = "meta_agent_ui"
SESSION_SECONDS = 12 * 3600  # a static-token session: a working day, then the sign-in link of a new start
CODE_SECONDS = 600.0  # a sign-in link is taken within this, or never
MAX_CODES = 64  # sign-in codes waiting at once: a new one beyond this drops the oldest
MAX_CODE_CHARS = 100  # a code is 43 characters; anything much longer is not one, and is not hashed
# What a browser keeps of one cookie (name and value, RFC 6265 section 6.1 asks for at least 4096 bytes).
MAX_COOKIE_CHARS = 4000
MAX_SIGNED_CHARS = 2000  # a signed value of ours is under 400 characters: a longer one is refused unread
COOKIE_PATH = "/ui"
NO_SESSION = "no valid session: sign in at /ui/sign-in, or send the Authorization header /mcp takes"


class Refused(Exception):
    """The request's credentials do not pass: `status` (401, or 403 for a scope missing) and one line."""

    def __init__(self, status: int, line: str) -> None:
        super().__init__(line)
        self.status = status
        self.line = line


@dataclass(frozen=True, kw_only=True)
class Admitted:
    """A request that passed; `by_cookie`: its session cookie vouched for it (so it must come from our own pages)."""

    by_cookie: bool


class Signer:
    """Values that say what they hold in the clear and cannot be changed or made without the key:
    `base64url(JSON).base64url(HMAC-SHA256)`, with an expiry (`exp`, seconds since the epoch) inside."""

    def __init__(self, key: bytes, clock: Callable[[], float] = time.time) -> None:
        self._key = key
        self.clock = clock

    def seal(self, claims: Mapping[str, Any], seconds: float) -> str:
        payload = _b64(json.dumps({**claims, "exp": int(self.clock() + seconds)}, separators=(",", ":")).encode())
        return f"{payload}.{_b64(self._mac(payload))}"

    def open(self, value: str) -> dict[str, Any] | None:
        """What `value` holds, if it was sealed with this key and has not expired; else None."""
        payload, dot, mac = value.partition(".")
        if not dot or len(value) > MAX_SIGNED_CHARS or not value.isascii():
            return None
        if not hmac.compare_digest(mac.encode(), _b64(self._mac(payload)).encode()):
            return None
        try:
            claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        except ValueError:
            return None
        if not isinstance(claims, dict) or not isinstance(claims.get("exp"), int) or claims["exp"] <= self.clock():
            return None
        return claims

    def _mac(self, payload: str) -> bytes:
        return hmac.new(self._key, payload.encode("ascii"), hashlib.sha256).digest()


class SignInCodes:
    """One-time sign-in codes: random, taken once, within CODE_SECONDS; only their digests are held."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._due: dict[bytes, float] = {}

    def new(self) -> str:
        now = self.clock()
        self._due = {digest: due for digest, due in self._due.items() if due > now}
        while len(self._due) >= MAX_CODES:
            del self._due[next(iter(self._due))]
        code = secrets.token_urlsafe(32)
        self._due[_digest(code)] = now + CODE_SECONDS
        return code

    def redeem(self, code: str) -> bool:
        """Whether `code` is one of ours, unused and in time; it is used up either way."""
        if len(code) > MAX_CODE_CHARS:
            return False
        due = self._due.pop(_digest(code), None)
        return due is not None and self.clock() < due


class ConsoleAuth:
    """The console's side of /mcp's credentials: `token` (META_AGENT_HTTP_TOKEN) or `verifier` (OAuth), or neither."""

    def __init__(self, *, token: str | None, verifier: JwtVerifier | None) -> None:
        self.token = token
        self.verifier = verifier
        self.codes = SignInCodes()
        self.signer = Signer(session_key(token)) if token else None

    @property
    def open(self) -> bool:
        """Whether /mcp, and so the console, takes requests without credentials."""
        return self.token is None and self.verifier is None

    async def admit(self, request: Request) -> Admitted:
        """Let the request pass, its verified subject (if any) put in its scope as /mcp's auth layer puts it.

        Raises:
            Refused: its Authorization header or its session cookie does not pass, or it has neither.
        """
        given = request.headers.getlist("authorization")
        if given:
            if len(given) > 1:
                raise Refused(401, "expected one Authorization header")
            await self._bearer(request, given[0])
            return Admitted(by_cookie=False)
        if self.open:
            return Admitted(by_cookie=False)
        cookie = request.cookies.get(SESSION_COOKIE)
        if not cookie:
            raise Refused(401, NO_SESSION)
        if self.signer is not None:
            claims = self.signer.open(cookie)
            if claims is None or claims.get("sub") != STATIC_TOKEN_SUBJECT:
                raise Refused(401, "the session cookie is not valid or has expired: sign in again at /ui/sign-in")
            request.scope[SCOPE_KEY] = STATIC_TOKEN_SUBJECT
        else:
            await self.verified(request, cookie)
        return Admitted(by_cookie=True)

    async def _bearer(self, request: Request, header: str) -> None:
        if self.token is not None:
            if not bearer_matches(header.encode("latin-1"), self.token):
                raise Refused(401, "missing or wrong bearer token (META_AGENT_HTTP_TOKEN)")
            request.scope[SCOPE_KEY] = STATIC_TOKEN_SUBJECT
        elif self.verifier is not None:
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer":
                raise Refused(401, "expected one bearer token")
            await self.verified(request, token.strip())
        # open: the Authorization header is the subject, as on /mcp (front/auth/subjects.py)

    async def verified(self, request: Request | None, token: str) -> AccessToken:
        """The access `token` gives, checked as /mcp checks it; the subject put in `request`'s scope.

        Raises:
            Refused: 401 for a token /mcp would refuse, 403 for a scope missing.
        """
        assert self.verifier is not None
        if len(token) > MAX_TOKEN_CHARS or not token.isascii():
            raise Refused(401, "the token is too long or not ASCII")
        try:
            access = await self.verifier.check(token)
        except TokenRefused as exc:
            raise Refused(401, str(exc)) from None
        resource = self.verifier.resource
        missing = [scope for scope in resource.scopes if scope not in access.scopes]
        if missing:
            raise Refused(403, f"missing scope: {' '.join(missing)}")
        if request is not None:
            request.scope[SCOPE_KEY] = f"{resource.issuer}#{access.subject}"
        return access

    def start_session(self, response: Response, *, secure: bool) -> None:
        """Give the static token's holder a session cookie."""
        assert self.signer is not None
        value = self.signer.seal({"sub": STATIC_TOKEN_SUBJECT}, SESSION_SECONDS)
        set_cookie(response, SESSION_COOKIE, value, max_age=SESSION_SECONDS, secure=secure, same_site="strict")


def set_cookie(
    response: Response, name: str, value: str, *, max_age: int, secure: bool, same_site: Literal["strict", "lax"]
) -> None:
    """A cookie of the console's: scripts cannot read it (HttpOnly), only /ui is sent it, over https only where the
    request came over https."""
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path=COOKIE_PATH,
        secure=secure,
        httponly=True,
        samesite=same_site,
    )


def over_https(request: Request) -> bool:
    """Whether the request came over https (to uvicorn, or to a proxy it trusts: X-Forwarded-Proto)."""
    return request.url.scheme == "https"


def notice(status: int, title: str, line: str, *, link: str | None = None, refresh: str | None = None) -> Response:
    """A small page of one line (no script, no style), with a link to follow and, where given, a redirect of the
    page's own (a meta refresh: a navigation this page starts, same-site)."""
    head = f'<meta http-equiv="refresh" content="0; url={html.escape(refresh)}">' if refresh else ""
    follow = f'<p><a href="{html.escape(link)}">{html.escape(link)}</a></p>' if link else ""
    body = (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>{head}'
        f"</head><body><h1>{html.escape(title)}</h1><p>{html.escape(line)}</p>{follow}</body></html>"
    )
    return HTMLResponse(body, status_code=status)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _digest(code: str) -> bytes:
    return hashlib.sha256(code.encode("utf-8", "surrogatepass")).digest()
