"""The keys an OAuth authorization server signs its access tokens with: its JWKS, found through its metadata (RFC 8414
`oauth-authorization-server`, else OpenID discovery's `openid-configuration`) unless its URL is configured, and kept.

Every fetch is bounded: FETCH_TIME_LIMIT for the whole document however slowly it trickles, MAX_DOCUMENT_BYTES read
from a stream (a longer one is dropped unread), no redirect followed. A token naming a key the set does not hold makes
the set fetch again, but at most once per `refetch_interval` seconds: a caller sending random `kid`s gets one fetch,
not one per request. Keys older than MAX_AGE are fetched again on the next token, so a key the server withdrew stops
being accepted; while the server is unreachable the keys last fetched stay in use.

Only signing keys of asymmetric types are kept (RSA, EC, OKP): a symmetric `oct` key, whose "public" half is the
secret, never verifies a token.
"""

from __future__ import annotations

import ipaddress
import json
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
import structlog

from meta_agent.shared.urls import loggable_url

log = structlog.get_logger(__name__)

FETCH_TIME_LIMIT = 5.0  # seconds for one whole document: a request waiting on a slow server waits no longer
MAX_DOCUMENT_BYTES = 256 * 1024  # a JWKS of ten RSA keys is about 5 KB; metadata documents are smaller still
REFETCH_INTERVAL = 30.0  # seconds between fetches at least, whatever `kid`s the tokens name
MAX_AGE = 3600.0  # seconds a fetched key set is trusted before the next token fetches it again
SIGNING_KEY_TYPES = frozenset({"RSA", "EC", "OKP"})
# The names an issuer's machine may be reached by over plain http: this machine only (a test's, a developer's).
LOOPBACK_NAMES = frozenset({"localhost"})


class KeySetUnavailable(Exception):
    """The metadata or the key set could not be fetched, or is not what it must be; the message says which."""


def checked_url(url: str, what: str) -> str:
    """`url` if it may name an authorization server's document: https, or http to this machine; a host; no
    fragment, query or user info (RFC 8414, section 2).

    Raises:
        ValueError: what is wrong with it, in one line (`what` names the URL, which is quoted without what a
            query or user info may hide).
    """
    shown = loggable_url(url)
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018  (a bad port raises here)
    except ValueError:
        raise ValueError(f"{what} {shown!r} is not a URL") from None
    if parts.scheme not in ("https", "http") or not host:
        raise ValueError(f"{what} {shown!r} is not an https URL")
    if parts.scheme == "http" and not _loopback(host):
        raise ValueError(f"{what} {shown!r} must be https (plain http is allowed to this machine only)")
    if parts.query or parts.fragment or "#" in url or parts.username is not None:
        raise ValueError(f"{what} {shown!r} must have no query, fragment or user info (it has, not quoted here)")
    return url


def _loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def discovery_urls(issuer: str) -> list[str]:
    """Where an issuer's metadata may be, in the order the MCP authorization spec tries them: RFC 8414's document
    (its well-known part before the issuer's path), then OpenID discovery's (before the path, then after it)."""
    parts = urlsplit(issuer)
    origin = f"{parts.scheme}://{parts.netloc}"
    path = parts.path.rstrip("/")
    if not path:
        return [f"{origin}/.well-known/oauth-authorization-server", f"{origin}/.well-known/openid-configuration"]
    return [
        f"{origin}/.well-known/oauth-authorization-server{path}",
        f"{origin}/.well-known/openid-configuration{path}",
        f"{origin}{path}/.well-known/openid-configuration",
    ]


async def fetch_json(url: str) -> dict[str, Any]:
    """The JSON object at `url`, fetched within FETCH_TIME_LIMIT and MAX_DOCUMENT_BYTES.

    Raises:
        KeySetUnavailable: no answer in time, an answer other than 200, too long, or not a JSON object.
    """
    shown = loggable_url(url)
    try:
        with anyio.fail_after(FETCH_TIME_LIMIT):
            async with (
                httpx2.AsyncClient(timeout=FETCH_TIME_LIMIT, follow_redirects=False) as http,
                http.stream("GET", url, headers={"Accept": "application/json"}) as response,
            ):
                if response.status_code != 200:
                    raise KeySetUnavailable(f"{shown} answered HTTP {response.status_code}")
                body = await bounded_body(response, url)
    except TimeoutError:
        raise KeySetUnavailable(f"{shown} did not answer within {FETCH_TIME_LIMIT:g} s") from None
    except (httpx2.HTTPError, httpx2.InvalidURL, httpx2.StreamError) as exc:
        raise KeySetUnavailable(f"{shown}: {type(exc).__name__}: {exc}") from None
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        raise KeySetUnavailable(f"{shown} did not answer JSON") from None
    if not isinstance(document, dict):
        raise KeySetUnavailable(f"{shown} did not answer a JSON object")
    return document


async def bounded_body(response: httpx2.Response, url: str) -> bytes:
    """The body of `response` (from `url`), read as a stream, MAX_DOCUMENT_BYTES at most.

    Raises:
        KeySetUnavailable: it is longer.
    """
    too_long = KeySetUnavailable(f"{loggable_url(url)} answered more than {MAX_DOCUMENT_BYTES:,} bytes")
    announced = response.headers.get("content-length", "")
    if announced.isdigit() and int(announced) > MAX_DOCUMENT_BYTES:
        raise too_long
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > MAX_DOCUMENT_BYTES:
            raise too_long
    return bytes(body)


class KeySet:
    """An issuer's signing keys, fetched when first needed and again (bounded) when a token names an unknown one."""

    def __init__(
        self,
        issuer: str,
        jwks_url: str | None = None,
        *,
        refetch_interval: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._issuer = issuer
        self._jwks_url = jwks_url
        self._refetch_interval = refetch_interval  # None: REFETCH_INTERVAL
        self._clock = clock
        self._keys: dict[str | None, Mapping[str, Any]] = {}
        self._fetched_at: float | None = None  # when the keys held were fetched
        self._tried_at: float | None = None  # when a fetch was last begun, whatever came of it
        self._lock = anyio.Lock()

    async def key(self, kid: str | None) -> Mapping[str, Any] | None:
        """The JWK named `kid` (None: the only key, where the set holds one), or None: the set holds no such key,
        even after a fetch, or may not fetch again yet."""
        found = self._keys.get(kid)
        if found is not None and (not self._stale() or self._lock.locked()):  # a refetch under way: keep using it
            return found
        async with self._lock:  # one fetch at a time; the others then find its keys
            if self._may_fetch():
                self._tried_at = self._clock()
                try:
                    with anyio.fail_after(FETCH_TIME_LIMIT):  # discovery and the key set together
                        self._keep(await self._fetch())
                except TimeoutError:
                    error = f"no keys within {FETCH_TIME_LIMIT:g} s"
                    log.warning("jwks_unavailable", issuer=self._issuer, error=error, kept=len(self._keys))
                except KeySetUnavailable as exc:
                    log.warning("jwks_unavailable", issuer=self._issuer, error=str(exc), kept=len(self._keys))
        return self._keys.get(kid)

    def _stale(self) -> bool:
        return self._fetched_at is None or self._clock() - self._fetched_at >= MAX_AGE

    def _may_fetch(self) -> bool:
        interval = REFETCH_INTERVAL if self._refetch_interval is None else self._refetch_interval
        return self._tried_at is None or self._clock() - self._tried_at >= interval

    async def _fetch(self) -> list[Mapping[str, Any]]:
        if self._jwks_url is None:
            self._jwks_url = await self._discover()
        document = await fetch_json(self._jwks_url)
        keys = document.get("keys")
        if not isinstance(keys, list):
            raise KeySetUnavailable(f"{self._jwks_url} holds no `keys` list")
        return [key for key in keys if _signing_key(key)]

    def _keep(self, keys: list[Mapping[str, Any]]) -> None:
        self._keys = {key["kid"]: key for key in keys if "kid" in key}
        if len(keys) == 1:
            self._keys[None] = keys[0]  # a token naming no key is checked against the only one
        self._fetched_at = self._clock()
        log.info("jwks_fetched", issuer=self._issuer, keys=len(keys))

    async def _discover(self) -> str:
        """The `jwks_uri` of the issuer's metadata."""
        url, metadata = await issuer_metadata(self._issuer)
        jwks_uri = metadata.get("jwks_uri")
        if not isinstance(jwks_uri, str):
            raise KeySetUnavailable(f"{url} names no jwks_uri")
        try:
            return checked_url(jwks_uri, "jwks_uri")
        except ValueError as exc:
            raise KeySetUnavailable(f"{url}: {exc}") from None


async def issuer_metadata(issuer: str) -> tuple[str, dict[str, Any]]:
    """Where the issuer's metadata is, and what it says: the first document of `discovery_urls` found, which must
    name this issuer (RFC 8414, section 3.3).

    Raises:
        KeySetUnavailable: none was found, or the one found is another issuer's.
    """
    problems = []
    for url in discovery_urls(issuer):
        try:
            metadata = await fetch_json(url)
        except KeySetUnavailable as exc:
            problems.append(str(exc))
            continue
        if metadata.get("issuer") != issuer:
            raise KeySetUnavailable(f"{url} is the metadata of issuer {metadata.get('issuer')!r}, not this one")
        return url, metadata
    raise KeySetUnavailable("no metadata found: " + "; ".join(problems))


def _signing_key(key: object) -> bool:
    return (
        isinstance(key, dict)
        and key.get("kty") in SIGNING_KEY_TYPES
        and key.get("use", "sig") == "sig"
        and isinstance(key.get("kid", ""), str)
    )
