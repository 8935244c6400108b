"""The HTTP front as an OAuth resource server (front/auth/resource_server.py), over real HTTP in this process: our server behind
`serve_http` on 127.0.0.1, tokens of the tests' own authorization server (fixtures/oauth_server.py) on a thread.

Every hostile token of issue 34 is refused with 401 `invalid_token` (a missing scope with 403), random `kid`s cost
one JWKS fetch, a rotated key one fetch, and the real SDK client works with a good token in both protocol eras.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import jwt
import pytest
from conftest import openai_env
from cryptography.hazmat.primitives import serialization
from fake_llm import FakeLLM, openai_reply
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.auth.middleware.auth_context import get_access_token
from oauth_server import AuthServer, SigningKey
from starlette.responses import PlainTextResponse
from starlette.types import Receive, Scope, Send

from meta_agent.config.settings import Settings
from meta_agent.front.auth import jwks
from meta_agent.front.auth.resource_server import SUBJECT_KEY, JwtVerifier, RequireJwt, ResourceServer
from meta_agent.front.http.app import _BearerToken, http_app
from meta_agent.front.http.serve import serve_http
from meta_agent.front.server import build_server

pytestmark = [pytest.mark.anyio, pytest.mark.quick]

MODEL = "openai:fake-model"
SCOPE = "tools"
WAIT = 30.0
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
# A 2026-07-28 request: each stands alone, so it answers 200 once past the front's checks.
ENVELOPE = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
DISCOVER = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": ENVELOPE}}
MODERN = {**MCP_HEADERS, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "server/discover"}


@pytest.fixture(scope="module")
def issuer() -> Iterator[AuthServer]:
    with AuthServer() as server:
        yield server


@asynccontextmanager
async def served(llm: FakeLLM, issuer: AuthServer, scopes: tuple[str, ...] = (SCOPE,)) -> AsyncIterator[str]:
    """Our server without children, its /mcp taking `issuer`'s tokens for http://127.0.0.1:PORT/mcp: its base URL."""
    server = build_server(Settings(model=MODEL), {}, openai_env(llm))
    sock = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    resource = ResourceServer(issuer=issuer.url, audience=f"{url}/mcp", scopes=scopes)
    async with anyio.create_task_group() as tg:
        tg.start_soon(serve_http, http_app(server, host="127.0.0.1", auth=resource), [sock])
        with anyio.fail_after(WAIT):
            while await _status(f"{url}/health") != 200:
                await anyio.sleep(0.05)
        yield url
        tg.cancel_scope.cancel()


async def _status(url: str) -> int:
    try:
        async with httpx2.AsyncClient(timeout=WAIT) as http:
            return (await http.get(url)).status_code
    except httpx2.HTTPError:
        return 0


@pytest.fixture(scope="module")
async def front(llm_endpoint: FakeLLM, issuer: AuthServer) -> AsyncIterator[str]:
    """One server for the tests that leave its keys as they are."""
    async with served(llm_endpoint, issuer) as url:
        yield url


async def post(
    url: str, authorization: str | None, body: dict[str, Any] = DISCOVER, http: httpx2.AsyncClient | None = None
) -> httpx2.Response:
    era = MODERN if body is DISCOVER else MCP_HEADERS
    headers = {**era, **({"Authorization": authorization} if authorization is not None else {})}
    if http is not None:
        return await http.post(f"{url}/mcp", headers=headers, json=body)
    async with httpx2.AsyncClient(timeout=WAIT) as own:
        return await own.post(f"{url}/mcp", headers=headers, json=body)


def hs256(claims: dict[str, Any], secret: bytes, kid: str) -> str:
    """An HS256 JWT signed with `secret` (PyJWT itself will not sign with a public key: an attacker's tool will)."""

    def part(value: dict[str, Any]) -> bytes:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=")

    signing_input = part({"alg": "HS256", "typ": "JWT", "kid": kid}) + b"." + part(claims)
    signature = base64.urlsafe_b64encode(hmac.new(secret, signing_input, hashlib.sha256).digest()).rstrip(b"=")
    return (signing_input + b"." + signature).decode()


def public_pem(issuer: AuthServer) -> bytes:
    return issuer.key.private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


STRANGER = SigningKey("stranger")
NOW = int(time.time())
# Each: how a hostile token is made from the issuer and this server's audience.
HOSTILE: dict[str, Callable[[AuthServer, str], str]] = {
    "alg none": lambda i, aud: jwt.encode(
        i.claims(aud=aud, scope=SCOPE), None, algorithm="none", headers={"kid": i.key.kid}
    ),
    "HS256 signed with the public key (PEM)": lambda i, aud: hs256(
        i.claims(aud=aud, scope=SCOPE), public_pem(i), i.key.kid
    ),
    "HS256 signed with the public JWK": lambda i, aud: hs256(
        i.claims(aud=aud, scope=SCOPE), json.dumps(i.key.jwk).encode(), i.key.kid
    ),
    "PS256 with a key published for RS256 only": lambda i, aud: jwt.encode(
        i.claims(aud=aud, scope=SCOPE), i.key.private, algorithm="PS256", headers={"kid": i.key.kid}
    ),
    "expired": lambda i, aud: i.mint(aud=aud, scope=SCOPE, exp=NOW - 3600, iat=NOW - 7200),
    "not yet valid": lambda i, aud: i.mint(aud=aud, scope=SCOPE, nbf=NOW + 3600),
    "wrong audience (a client id)": lambda i, aud: i.mint(aud="test", scope=SCOPE),
    "another resource": lambda i, aud: i.mint(aud="https://other.example.com/mcp", scope=SCOPE),
    "a resource on this host's other port": lambda i, aud: i.mint(aud=aud.replace("/mcp", "0/mcp"), scope=SCOPE),
    "no audience": lambda i, aud: i.mint(scope=SCOPE),
    "wrong issuer": lambda i, aud: i.mint(aud=aud, scope=SCOPE, iss="https://evil.example.com"),
    "the issuer with a trailing slash": lambda i, aud: i.mint(aud=aud, scope=SCOPE, iss=i.url + "/"),
    "no expiry": lambda i, aud: i.mint(aud=aud, scope=SCOPE, exp=None),
    "no subject": lambda i, aud: i.mint(aud=aud, scope=SCOPE, sub=None),
    "an empty subject": lambda i, aud: i.mint(aud=aud, scope=SCOPE, sub=""),
    "a subject that is no string": lambda i, aud: i.mint(aud=aud, scope=SCOPE, sub=42),
    "a subject of 2,000 characters": lambda i, aud: i.mint(aud=aud, scope=SCOPE, sub="x" * 2000),
    "a key the issuer does not publish": lambda i, aud: i.mint(key=STRANGER, aud=aud, scope=SCOPE),
    "a published kid, signed by another key": lambda i, aud: jwt.encode(
        i.claims(aud=aud, scope=SCOPE), STRANGER.private, algorithm="RS256", headers={"kid": i.key.kid}
    ),
    "a tampered payload": lambda i, aud: _tampered(i.mint(aud=aud, scope=SCOPE)),
    "not a JWT": lambda i, aud: "not.a.jwt",
    "a JWT with a header that is no object": lambda i, aud: "WzFd.e30.AA",
}


def _tampered(token: str) -> str:
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    claims["sub"] = "mallory"
    return ".".join([header, base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode(), signature])


@pytest.mark.parametrize("make", HOSTILE.values(), ids=HOSTILE.keys())
async def test_a_hostile_token_is_refused(
    front: str, issuer: AuthServer, make: Callable[[AuthServer, str], str]
) -> None:
    response = await post(front, f"Bearer {make(issuer, f'{front}/mcp')}")
    assert response.status_code == 401, response.text
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith('Bearer error="invalid_token", error_description="')
    assert f'resource_metadata="{front}/.well-known/oauth-protected-resource/mcp"' in challenge
    assert response.json()["error"] == "invalid_token"


async def test_a_good_token_passes_and_each_refusal_says_why(front: str, issuer: AuthServer) -> None:
    audience = f"{front}/mcp"
    passed = await post(front, f"Bearer {issuer.mint(aud=audience, scope=f'openid {SCOPE}')}")
    assert passed.status_code == 200, passed.text
    for token, why in [
        (issuer.mint(aud=audience, scope=SCOPE, exp=NOW - 3600), "the token has expired"),
        (issuer.mint(aud=audience, scope=SCOPE, nbf=NOW + 3600), "the token is not valid yet"),
        (
            issuer.mint(aud="https://other.example.com/mcp", scope=SCOPE),
            f"the token is not for this resource ({audience})",
        ),
        (issuer.mint(key=STRANGER, aud=audience), "the token is signed with a key the issuer does not publish"),
    ]:
        assert (await post(front, f"Bearer {token}")).json()["error_description"] == why
    # a list of audiences that holds ours, `scp` as a list, `aud` with a trailing slash: each passes
    for token in [
        issuer.mint(aud=["https://other.example.com", audience], scope=SCOPE),
        issuer.mint(aud=audience, scp=["x", SCOPE]),
        issuer.mint(aud=audience, scp=f"x {SCOPE}"),
        issuer.mint(aud=audience + "/", scope=SCOPE),
        issuer.mint(aud=audience, scope=SCOPE, nbf=NOW - 10),
    ]:
        assert (await post(front, f"Bearer {token}")).status_code == 200


async def test_no_token_is_401_with_the_metadata_the_scopes_and_no_error_code(front: str, issuer: AuthServer) -> None:
    """The first 401 names the scopes required (the MCP authorization spec), as the 403 of a token short of them does."""
    for authorization in [None, "Basic dXNlcjpwYXNz", "Bearer"]:
        response = await post(front, authorization)
        assert response.status_code == 401
        challenge = response.headers["www-authenticate"]
        assert challenge.endswith(
            f'scope="{SCOPE}", resource_metadata="{front}/.well-known/oauth-protected-resource/mcp"'
        )
        assert ("error=" in challenge) == (authorization is not None)
    async with httpx2.AsyncClient() as http:
        for path in ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"]:
            metadata = (await http.get(front + path)).json()
            assert metadata["resource"] == f"{front}/mcp"
            assert metadata["authorization_servers"] == [issuer.url]
            assert metadata["scopes_supported"] == [SCOPE]
            assert metadata["bearer_methods_supported"] == ["header"]


async def test_without_scopes_required_no_challenge_names_any(llm: FakeLLM, issuer: AuthServer) -> None:
    async with served(llm, issuer, scopes=()) as url:
        first = await post(url, None)
        refused = await post(url, "Bearer not-a-token")
    assert (
        first.headers["www-authenticate"]
        == f'Bearer resource_metadata="{url}/.well-known/oauth-protected-resource/mcp"'
    )
    assert refused.status_code == 401 and "scope=" not in refused.headers["www-authenticate"]


async def test_a_missing_scope_is_403_naming_it(front: str, issuer: AuthServer) -> None:
    for scopes in [{"scope": "openid profile"}, {}, {"scp": ["openid"]}, {"scope": "toolsx"}]:
        response = await post(front, f"Bearer {issuer.mint(aud=f'{front}/mcp', **scopes)}")
        assert response.status_code == 403, scopes
        challenge = response.headers["www-authenticate"]
        assert challenge.startswith('Bearer error="insufficient_scope", error_description="missing scope: tools"')
        assert f'scope="{SCOPE}"' in challenge


async def test_a_one_megabyte_authorization_header_is_refused_cheaply(front: str, issuer: AuthServer) -> None:
    """h11 refuses a request head over 16 KB before our code sees it; under that, a token past MAX_TOKEN_CHARS is
    refused before it is parsed (no key fetch, no JSON decoding)."""
    before = issuer.fetches
    huge = "Bearer " + "A" * (1024 * 1024)
    try:
        response = await post(front, huge)
        assert response.status_code in (400, 431)
    except httpx2.TransportError:
        pass  # uvicorn answers 400 and closes while the client still writes: it sees the connection reset
    header_part = base64.urlsafe_b64encode(json.dumps({"alg": "RS256", "kid": "k" * 14_000}).encode()).decode()
    response = await post(front, f"Bearer {header_part}.e30.AA")
    assert response.status_code == 401
    assert response.json()["error_description"] == "expected one bearer token"
    assert issuer.fetches == before
    assert await _status(f"{front}/health") == 200


async def test_odd_subjects_pass_and_are_the_callers(front: str, issuer: AuthServer) -> None:
    """Quotes, newlines, `#`, non-ASCII, 1,024 characters: opaque ids all, each a caller of its own."""
    for sub in ['a"b\\c', "line\nbreak", "x#y@z", "ünïcødé 🔑", "\x00\x7f", "s" * 1024, "  "]:
        response = await post(front, f"Bearer {issuer.mint(aud=f'{front}/mcp', scope=SCOPE, sub=sub)}")
        assert response.status_code == 200, (sub, response.text)


async def test_health_shows_more_only_to_a_token_mcp_takes(front: str, issuer: AuthServer) -> None:
    good = issuer.mint(aud=f"{front}/mcp", scope=SCOPE)
    for authorization, detailed in [
        (f"Bearer {good}", True),
        (None, False),
        (f"Bearer {issuer.mint(aud=f'{front}/mcp')}", False),  # no scope
        (f"Bearer {issuer.mint(aud='https://other.example.com/mcp', scope=SCOPE)}", False),
        ("Bearer " + "A" * 13_000, False),
    ]:
        headers = {"Authorization": authorization} if authorization else {}
        async with httpx2.AsyncClient() as http:
            health = (await http.get(f"{front}/health", headers=headers)).json()
        assert ("version" in health) == detailed, authorization


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_sdk_client_with_a_token_in_both_eras(
    mode: str, front: str, issuer: AuthServer, llm: FakeLLM
) -> None:
    headers = {"Authorization": f"Bearer {issuer.mint(aud=f'{front}/mcp', scope=SCOPE)}"}
    llm.reply(openai_reply("hello from the model"))
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http,
        Client(streamable_http_client(f"{front}/mcp", http_client=http), mode=mode) as client,
    ):
        assert client.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
        assert {tool.name for tool in (await client.list_tools()).tools} >= {"ask", "agent"}
        result = await client.call_tool("ask", {"prompt": "hi"})
        assert not result.is_error, result.content
        assert result.content[0].text == "hello from the model"  # type: ignore[union-attr]


async def test_a_legacy_session_is_only_its_subjects(front: str, issuer: AuthServer) -> None:
    """A 2025-11-25 session opened with alice's token is not found with bob's (the SDK binds it to the subject)."""
    alice, bob = (issuer.mint(aud=f"{front}/mcp", scope=SCOPE, sub=sub) for sub in ("alice", "bob"))
    initialize = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    opened = await post(front, f"Bearer {alice}", initialize)
    assert opened.status_code == 200, opened.text
    session = opened.headers["mcp-session-id"]
    async with httpx2.AsyncClient(timeout=WAIT) as http:
        for token, status in [(bob, 404), (alice, 202)]:
            headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}", "Mcp-Session-Id": session}
            headers["MCP-Protocol-Version"] = "2025-11-25"
            sent = await http.post(
                f"{front}/mcp", headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
            )
            assert sent.status_code == status, (token == bob, sent.text)


async def test_random_kids_cost_one_fetch(llm: FakeLLM, issuer: AuthServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jwks, "REFETCH_INTERVAL", 3600.0)  # no second fetch may fall due while the test runs
    async with served(llm, issuer) as url:
        before = issuer.fetches
        assert (await post(url, f"Bearer {issuer.mint(aud=f'{url}/mcp', scope=SCOPE)}")).status_code == 200
        assert issuer.fetches == before + 1  # the first token fetches the keys
        async with httpx2.AsyncClient(timeout=WAIT) as http, anyio.create_task_group() as tg:
            for _ in range(100):
                token = issuer.mint(key=STRANGER, headers={"kid": secrets.token_hex(8)}, aud=f"{url}/mcp", scope=SCOPE)
                tg.start_soon(_refused, url, token, http)
        assert issuer.fetches == before + 1


async def _refused(url: str, token: str, http: httpx2.AsyncClient) -> None:
    assert (await post(url, f"Bearer {token}", http=http)).status_code == 401


async def test_a_rotated_key_is_fetched_once(llm: FakeLLM, issuer: AuthServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jwks, "REFETCH_INTERVAL", 0.0)  # an unknown kid may fetch at once: the rotation is fresh
    async with served(llm, issuer) as url:
        old = issuer.key
        assert (await post(url, f"Bearer {issuer.mint(aud=f'{url}/mcp', scope=SCOPE)}")).status_code == 200
        before = issuer.fetches
        new = issuer.rotate()
        for key in [new, new, old, new, old]:
            assert (await post(url, f"Bearer {issuer.mint(key=key, aud=f'{url}/mcp', scope=SCOPE)}")).status_code == 200
        assert issuer.fetches == before + 1


async def test_the_callers_subject_is_in_the_scope(issuer: AuthServer) -> None:
    """The contract with front/auth/subjects.py: `ISSUER#sub` as the token has it (static token: "token"); and the SDK's
    get_access_token() answers inside. Straight through the ASGI middleware, as an embedder mounts it: no h11 in front
    to cap the head, so a 1 MB header reaches it, and is refused before anything is parsed or fetched."""
    seen: list[tuple[str | None, str | None]] = []

    async def inner(scope: Scope, receive: Receive, send: Send) -> None:
        access = get_access_token()
        seen.append((scope.get(SUBJECT_KEY), access.subject if access else None))
        await PlainTextResponse("ok")(scope, receive, send)

    resource = ResourceServer(issuer=issuer.url, audience="http://testserver/mcp")
    subs = ["alice", 'a"b\\c', "line\nbreak", "x#y", "ünïcødé", "s" * 1024]
    for app in [RequireJwt(inner, JwtVerifier(resource)), _BearerToken(inner, "static")]:
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app), base_url="http://testserver") as http:
            before = issuer.fetches
            huge = await http.get("/mcp", headers={"Authorization": "Bearer " + "A" * (1024 * 1024)})
            assert huge.status_code == 401
            assert issuer.fetches == before
            for sub in subs:
                token = issuer.mint(aud="http://testserver/mcp", sub=sub) if isinstance(app, RequireJwt) else "static"
                assert (await http.get("/mcp", headers={"Authorization": f"Bearer {token}"})).status_code == 200
    assert seen == [(f"{issuer.url}#{sub}", sub) for sub in subs] + [("token", None)] * len(subs)
