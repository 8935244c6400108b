"""The OAuth resource server (front/auth/resource_server.py, front/auth/jwks.py) under attack, beyond the hostile tokens of test_auth.py:
header tricks that try to bring their own key or a key of another type, `crit`, nested JWTs and JWEs, claims at the
edges of the leeway and of what JSON holds; key sets served through redirects, gzip bombs and a byte at a time; and a
slow issuer, which must not hold up the callers whose keys are already known, nor make discovery wait past its bound.
Real HTTP on 127.0.0.1, the tests' own authorization server (fixtures/oauth_server.py) on a thread."""

from __future__ import annotations

import base64
import gzip
import json
import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import jwt
import pytest
from conftest import openai_env, serving_asgi
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding
from fake_llm import FakeLLM
from oauth_server import AuthServer, SigningKey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.routing import Route
from threaded_web import ThreadedWeb

from meta_agent.config.settings import Settings
from meta_agent.front.auth import jwks
from meta_agent.front.auth.jwks import KeySet, KeySetUnavailable, fetch_json
from meta_agent.front.auth.resource_server import LEEWAY, JwtVerifier, ResourceServer, TokenRefused
from meta_agent.front.http.app import http_app
from meta_agent.front.server import build_server

pytestmark = [pytest.mark.anyio, pytest.mark.quick]

MODEL = "openai:fake-model"
WAIT = 30.0
AUD = "http://127.0.0.1:9/mcp"  # the verifier-level tests' audience: no server listens there
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
ENVELOPE = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
DISCOVER = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": ENVELOPE}}
MODERN = {**MCP_HEADERS, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "server/discover"}
STRANGER = SigningKey("stranger")


class EcKey:
    """A P-256 signing key published beside the issuer's RSA ones (kid `ec-1`)."""

    def __init__(self) -> None:
        self.kid = "ec-1"
        self.private = ec.generate_private_key(ec.SECP256R1())
        self.jwk = {**jwt.algorithms.ECAlgorithm.to_jwk(self.private.public_key(), as_dict=True), "kid": self.kid}
        self.jwk["use"] = "sig"


EC = EcKey()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def issuer() -> Iterator[AuthServer]:
    with AuthServer() as server:
        server.keys.insert(0, EC)  # published, never the one `mint` signs with
        yield server


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _rs256(header: dict[str, Any], payload: bytes, issuer: AuthServer) -> str:
    """A token signed by the issuer's real key over any header and payload bytes (PyJWT would refuse some)."""
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(payload)}".encode()
    signature = issuer.key.private.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input.decode()}.{_b64(signature)}"


def _sign(issuer: AuthServer, key: Any, alg: str = "RS256", **header: Any) -> str:
    return jwt.encode(issuer.claims(aud=AUD), key, algorithm=alg, headers=header)


def now() -> int:
    """The time a token is minted at: read when it is minted, not when the module was imported."""
    return int(time.time())


HOSTILE: dict[str, Callable[[AuthServer], str]] = {
    "RS256 naming the issuer's EC key": lambda i: _sign(i, i.key.private, kid=EC.kid),
    "ES256 by a stranger naming the issuer's EC key": lambda i: _sign(
        i, ec.generate_private_key(ec.SECP256R1()), "ES256", kid=EC.kid
    ),
    "its own key in a `jwk` header, a published kid": lambda i: _sign(
        i, STRANGER.private, kid=i.key.kid, jwk=STRANGER.jwk
    ),
    "its own key in a `jwk` header, no kid": lambda i: _sign(i, STRANGER.private, jwk=STRANGER.jwk),
    "its own key set in `jku`": lambda i: _sign(i, STRANGER.private, kid="stranger", jku="http://127.0.0.1:1/jwks"),
    "its own certificate in `x5u`": lambda i: _sign(i, STRANGER.private, kid="stranger", x5u="http://127.0.0.1:1/c"),
    "a `crit` extension nobody knows": lambda i: _sign(i, i.key.private, kid=i.key.kid, crit=["exp"]),
    "an unencoded payload (b64 false)": lambda i: jwt.api_jws.encode(
        json.dumps(i.claims(aud=AUD)).encode(),
        i.key.private,
        algorithm="RS256",
        headers={"kid": i.key.kid, "b64": False, "crit": ["b64"]},
    ),
    "the issuer in capitals": lambda i: i.mint(aud=AUD, iss=i.url.upper()),
    "the audience in capitals": lambda i: i.mint(aud=AUD.upper()),
    "an audience list with a number": lambda i: i.mint(aud=[1, AUD]),
    "expired just past the leeway": lambda i: i.mint(aud=AUD, exp=now() - LEEWAY - 20),
    "not valid until just past the leeway": lambda i: i.mint(aud=AUD, nbf=now() + LEEWAY + 20),
    "issued in the future": lambda i: i.mint(aud=AUD, iat=now() + 3600),
    "exp NaN": lambda i: i.mint(aud=AUD, exp=float("nan")),
    "exp Infinity": lambda i: i.mint(aud=AUD, exp=float("inf")),
    "nbf NaN": lambda i: i.mint(aud=AUD, nbf=float("nan")),
    "claims nested 2,500 deep": lambda i: _rs256(
        {"alg": "RS256", "kid": i.key.kid},
        json.dumps(i.claims(aud=AUD))[:-1].encode() + b', "x": ' + b"[" * 2500 + b"]" * 2500 + b"}",
        i,
    ),
    "a header nested 4,000 deep": lambda i: (
        _b64(b'{"alg": "RS256", "x": ' + b"[" * 4000 + b"]" * 4000 + b"}")[:11_000] + ".e30.AA"
    ),
    "a nested JWT (cty JWT)": lambda i: jwt.api_jws.encode(
        i.mint(aud=AUD).encode(), i.key.private, algorithm="RS256", headers={"kid": i.key.kid, "cty": "JWT"}
    ),
    "a JWE": lambda i: "eyJhbGciOiJSU0EtT0FFUCIsImVuYyI6IkEyNTZHQ00ifQ.AAAA.AAAA.AAAA.AAAA",
    "a kid that is a number": lambda i: _b64(b'{"alg": "RS256", "kid": 5}') + ".e30.AA",
    "an alg that is a list": lambda i: _b64(json.dumps({"alg": ["RS256"], "kid": i.key.kid}).encode()) + ".e30.AA",
    "no kid, the issuer publishing several keys": lambda i: jwt.encode(i.claims(aud=AUD), i.key.private, "RS256"),
    "a subject of 10 kB": lambda i: i.mint(aud=AUD, sub="x" * 10_000),
}


@pytest.mark.parametrize("make", HOSTILE.values(), ids=HOSTILE.keys())
async def test_a_hostile_token_is_refused_and_nothing_else_escapes(
    issuer: AuthServer, make: Callable[[AuthServer], str]
) -> None:
    verifier = JwtVerifier(ResourceServer(issuer=issuer.url, audience=AUD))
    with pytest.raises(TokenRefused):
        await verifier.check(make(issuer))


async def test_tokens_at_the_edges_that_pass(issuer: AuthServer) -> None:
    """Inside the leeway, an audience list holding ours, the EC key with its own algorithm, odd subjects: taken, and
    each subject as the token has it (a lone surrogate too)."""
    verifier = JwtVerifier(ResourceServer(issuer=issuer.url, audience=AUD))
    for token, sub in [
        (issuer.mint(aud=AUD, exp=now() - LEEWAY + 20), "alice"),
        (issuer.mint(aud=AUD, nbf=now() + LEEWAY - 20), "alice"),
        (issuer.mint(aud=["https://other.example.com/mcp", AUD]), "alice"),
        (_sign(issuer, EC.private, "ES256", kid=EC.kid), "alice"),
        (issuer.mint(aud=AUD, sub="\ud800"), "\ud800"),
        (issuer.mint(aud=AUD, sub="a#b\x00c\nd"), "a#b\x00c\nd"),
    ]:
        assert (await verifier.check(token)).subject == sub


class Hostile(ThreadedWeb):
    """A key-set server that redirects elsewhere, answers a gzip bomb, or trickles a byte at a time."""

    def __init__(self, elsewhere: str) -> None:
        bomb = gzip.compress(b'{"keys": [' + b" " * (64 * 1024 * 1024) + b"]}", 9)  # 64 MB in about 64 KB

        async def trickle() -> AsyncIterator[bytes]:
            yield b'{"keys": ['
            while True:
                yield b" "
                await anyio.sleep(0.01)

        super().__init__(
            Starlette(
                routes=[
                    Route("/redirect", lambda _r: RedirectResponse(f"{elsewhere}/jwks", status_code=302)),
                    Route("/bomb", lambda _r: Response(bomb, headers={"content-encoding": "gzip"})),
                    Route("/trickle", lambda _r: StreamingResponse(trickle(), media_type="application/json")),
                ]
            )
        )


async def test_a_key_set_that_redirects_bombs_or_trickles_is_dropped(
    issuer: AuthServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jwks, "FETCH_TIME_LIMIT", 0.5)
    with Hostile(issuer.url) as web:
        before = issuer.fetches
        for path, why in [("/redirect", "answered HTTP 302"), ("/bomb", "answered more than"), ("/trickle", "within")]:
            with anyio.fail_after(WAIT), pytest.raises(KeySetUnavailable, match=why):
                await fetch_json(web.url + path)
        assert issuer.fetches == before  # the redirect was not followed


class SlowMetadata(ThreadedWeb):
    """An issuer (at `/slow`) every one of whose metadata documents is answered a byte at a time, never finished;
    `asked` counts them."""

    def __init__(self) -> None:
        self.asked = 0

        async def slowly(_request: Request) -> Response:
            self.asked += 1

            async def trickle() -> AsyncIterator[bytes]:
                while True:
                    yield b" "
                    await anyio.sleep(0.01)

            return StreamingResponse(trickle(), media_type="application/json")

        paths = [
            "/.well-known/oauth-authorization-server/slow",
            "/.well-known/openid-configuration/slow",
            "/slow/.well-known/openid-configuration",
        ]
        super().__init__(Starlette(routes=[Route(path, slowly) for path in paths]))


async def test_discovery_waits_no_longer_than_one_fetch_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """FETCH_TIME_LIMIT is what a request waits on a slow issuer: discovery and the key set together, not each of the
    three metadata documents and then the key set (4 x 5 s in all). A document that never finishes uses up the whole
    bound, so no second one is asked for."""
    monkeypatch.setattr(jwks, "FETCH_TIME_LIMIT", 0.5)
    with SlowMetadata() as web:
        with anyio.fail_after(WAIT):
            assert await KeySet(f"{web.url}/slow").key("k") is None
        assert web.asked == 1


async def test_a_known_key_is_not_held_up_by_a_slow_refetch_of_a_stale_set(issuer: AuthServer) -> None:
    """Once the set is older than MAX_AGE one request fetches it again; while a slow issuer keeps that fetch going
    (up to FETCH_TIME_LIMIT, and again every REFETCH_INTERVAL while the issuer stays slow), the other callers of a key
    the set holds go on with it instead of queueing behind the fetch."""
    clock = Clock()
    keys = KeySet(issuer.url, clock=clock)
    known = issuer.key
    assert await keys.key(known.kid) == known.jwk
    fetched = issuer.fetches
    clock.now += jwks.MAX_AGE + 1
    issuer.jwks_mode = "slow"
    refetched: list[bool] = []

    async def refetch() -> None:
        await keys.key(known.kid)
        refetched.append(True)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(refetch)
            with anyio.fail_after(WAIT):
                while issuer.fetches == fetched:  # the slow fetch has begun, under the set's lock
                    await anyio.sleep(0.01)
            assert await keys.key(known.kid) == known.jwk
            assert not refetched, "the known key waited for the slow fetch to give up"
            tg.cancel_scope.cancel()
    finally:
        issuer.jwks_mode = "ok"


@asynccontextmanager
async def served(llm: FakeLLM, issuer: AuthServer) -> AsyncIterator[str]:
    server = build_server(Settings(model=MODEL), {}, openai_env(llm))

    def app(url: str) -> Any:
        return http_app(server, host="127.0.0.1", auth=ResourceServer(issuer=issuer.url, audience=f"{url}/mcp"))

    async with serving_asgi(app, WAIT) as url:
        yield url


async def test_random_kids_during_a_slow_fetch_hold_up_no_caller_with_a_known_key(
    llm_endpoint: FakeLLM, issuer: AuthServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over HTTP: fifty callers with random kids start a key-set fetch that a slow issuer holds; a caller whose key
    the set holds is answered meanwhile, and the fifty cost one fetch."""
    monkeypatch.setattr(jwks, "REFETCH_INTERVAL", 0.0)  # the first random kid may fetch at once
    async with served(llm_endpoint, issuer) as url, httpx2.AsyncClient(timeout=WAIT) as http:
        good = {**MODERN, "Authorization": f"Bearer {issuer.mint(aud=f'{url}/mcp')}"}
        assert (await http.post(f"{url}/mcp", headers=good, json=DISCOVER)).status_code == 200
        monkeypatch.setattr(jwks, "REFETCH_INTERVAL", 3600.0)  # now one fetch at most
        fetched = issuer.fetches
        issuer.jwks_mode = "slow"
        refused: list[int] = []

        async def random_kid() -> None:
            token = issuer.mint(key=STRANGER, headers={"kid": secrets.token_hex(8)}, aud=f"{url}/mcp")
            headers = {**MODERN, "Authorization": f"Bearer {token}"}
            refused.append((await http.post(f"{url}/mcp", headers=headers, json=DISCOVER)).status_code)

        try:
            async with anyio.create_task_group() as tg:
                monkeypatch.setattr(jwks, "REFETCH_INTERVAL", 0.0)
                tg.start_soon(random_kid)
                with anyio.fail_after(WAIT):
                    while issuer.fetches == fetched:
                        await anyio.sleep(0.01)
                monkeypatch.setattr(jwks, "REFETCH_INTERVAL", 3600.0)
                for _ in range(49):
                    tg.start_soon(random_kid)
                assert (await http.post(f"{url}/mcp", headers=good, json=DISCOVER)).status_code == 200
                assert len(refused) < 50  # answered while the fetch was still held
                issuer.jwks_mode = "ok"
        finally:
            issuer.jwks_mode = "ok"
        assert refused == [401] * 50
        assert issuer.fetches == fetched + 1


async def test_a_lone_surrogate_subject_over_http_is_served(llm_endpoint: FakeLLM, issuer: AuthServer) -> None:
    async with served(llm_endpoint, issuer) as url, httpx2.AsyncClient(timeout=WAIT) as http:
        token = issuer.mint(aud=f"{url}/mcp", sub="\ud800")
        response = await http.post(f"{url}/mcp", headers={**MODERN, "Authorization": f"Bearer {token}"}, json=DISCOVER)
        assert response.status_code == 200, response.text
        health = await http.get(f"{url}/health", headers={"Authorization": f"Bearer {token}"})
        assert "version" in health.json()
        assert json.dumps(health.json()).find(token) == -1
