"""Which Host and Origin headers the HTTP server answers: the defence against DNS rebinding.

A page on an attacker's site can reach 127.0.0.1 under a DNS name of the attacker's; its requests then carry that
name in `Host` (and, when scripted across sites, its own `Origin`). So each header is parsed as host[:port]
(`Origin` as scheme://host[:port]) and the host compared exactly with the allowed names: no prefix or suffix
matching, nothing before the host or after the port. Names are compared without regard to case (RFC 9110: browsers
send them lowercase, curl as typed).

/health is not behind the guard: a load balancer's or orchestrator's probe names the server by an address of its own
(Host: <pod IP>:port). It learns only whether the server is up; the details need a Host the guard `answers`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import structlog
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from meta_agent.shared.urls import loggable_url

log = structlog.get_logger(__name__)

# A DNS name or IPv4 address (lowercase labels, no empty one, no trailing dot) or a bracketed IPv6 address, then
# an optional port written as browsers write it (no leading zero).
_AUTHORITY = re.compile(
    r"(?P<host>[a-z0-9_-]+(?:\.[a-z0-9_-]+)*|\[[0-9a-f:.]+\])(?::(?P<port>0|[1-9][0-9]{0,4}))?", re.ASCII
)
_ORIGIN = re.compile(r"(?P<scheme>https?)://(?P<authority>.*)", re.ASCII | re.DOTALL)
# The names a local server always answers to; the address it binds and --allowed-host values join them.
LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
# RFC 9110: 421 says this server does not serve that authority; 403 refuses a page of another origin.
BAD_HOST = 421
BAD_ORIGIN = 403


@dataclass(frozen=True)
class Authority:
    """A host and, where given, a port."""

    host: str
    port: int | None = None


def parse_authority(text: str) -> Authority | None:
    """`text` as host[:port], exactly as a browser writes it; None if it is anything else."""
    found = _AUTHORITY.fullmatch(text)
    if found is None:
        return None
    port = found["port"]
    if port is not None and int(port) > 65535:
        return None
    return Authority(found["host"], int(port) if port is not None else None)


def allowed_authority(value: str) -> Authority:
    """A name to answer to, as a user writes it: any case, an IPv6 address with or without brackets, a port or not
    (without one, every port is allowed).

    Raises:
        ValueError: `value` is not a host[:port].
    """
    text = value.strip().lower()
    if text.count(":") > 1 and not text.startswith("["):
        text = f"[{text}]"
    authority = parse_authority(text)
    if authority is None:
        raise ValueError(f"{value!r} is not a host or host:port (e.g. example.com, example.com:8765, [::1])")
    return authority


class HostGuard:
    """Answers only requests whose Host is one of `allowed` (421 otherwise) and whose Origin, if any, is an http(s)
    origin on one of them (403 otherwise)."""

    def __init__(self, app: ASGIApp, allowed: frozenset[Authority]) -> None:
        self._app = app
        self._allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = self._refusal(scope)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self._app(scope, receive, send)

    def answers(self, scope: Scope) -> bool:
        """Whether the request's Host and Origin pass (nothing is logged)."""
        return self._bad_header(scope) is None

    def _refusal(self, scope: Scope) -> JSONResponse | None:
        bad = self._bad_header(scope)
        if bad is None:
            return None
        values = [_text(value) for name, value in scope["headers"] if name == bad]
        if bad == b"host":
            log.warning("http_host_refused", host=values)
            return _error("Host header not allowed (see --allowed-host)", BAD_HOST)
        log.warning("http_origin_refused", origin=[loggable_url(value) for value in values])
        return _error("Origin header not allowed (see --allowed-host)", BAD_ORIGIN)

    def _bad_header(self, scope: Scope) -> bytes | None:
        """b"host" or b"origin" if that header is missing, repeated or not allowed (an Origin may be absent)."""
        hosts = [value for name, value in scope["headers"] if name == b"host"]
        origins = [value for name, value in scope["headers"] if name == b"origin"]
        if len(hosts) != 1 or not self._allows(_text(hosts[0])):
            return b"host"
        if origins and (len(origins) != 1 or not self._allows_origin(_text(origins[0]))):
            return b"origin"
        return None

    def _allows(self, text: str) -> bool:
        authority = parse_authority(text.lower())
        if authority is None:
            return False
        return authority in self._allowed or Authority(authority.host) in self._allowed

    def _allows_origin(self, text: str) -> bool:
        found = _ORIGIN.fullmatch(text.lower())
        return found is not None and self._allows(found["authority"])


def _text(raw: bytes) -> str:
    return raw.decode("latin-1")


def _error(message: str, status: int) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)
