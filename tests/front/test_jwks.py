"""An issuer's keys (front/auth/jwks.py) against servers on 127.0.0.1: discovery, bounded fetches, and how often a key set
is fetched under random `kid`s, key rotation and an issuer that is down, slow or huge (a clock of the test's own
stands for the passing of time). And the META_AGENT_AUTH_* settings, checked at start (front/auth/resource_server.py)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from oauth_server import AuthServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from threaded_web import ThreadedWeb

from meta_agent.config.settings import Settings
from meta_agent.errors import ConfigError
from meta_agent.front.auth import jwks
from meta_agent.front.auth.jwks import KeySet, checked_url, discovery_urls
from meta_agent.front.auth.resource_server import ResourceServer, resource_server

pytestmark = [pytest.mark.anyio, pytest.mark.quick]
INTERVAL = 30.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def issuer() -> Iterator[AuthServer]:
    with AuthServer() as server:
        yield server


async def test_random_kids_fetch_once_per_interval(issuer: AuthServer) -> None:
    clock = Clock()
    keys = KeySet(issuer.url, refetch_interval=INTERVAL, clock=clock)
    assert await keys.key(issuer.key.kid) == issuer.key.jwk
    assert (issuer.metadata_fetches, issuer.fetches) == (1, 1)
    for _ in range(1000):
        assert await keys.key(secrets.token_hex(8)) is None
    assert issuer.fetches == 1
    clock.now += INTERVAL
    assert await keys.key(secrets.token_hex(8)) is None
    for _ in range(1000):
        assert await keys.key(secrets.token_hex(8)) is None
    assert (issuer.metadata_fetches, issuer.fetches) == (1, 2)  # the metadata is not asked again
    assert await keys.key(issuer.key.kid) == issuer.key.jwk  # a known key costs nothing
    assert issuer.fetches == 2


async def test_a_rotated_key_is_fetched_once_and_a_withdrawn_one_dropped(issuer: AuthServer) -> None:
    clock = Clock()
    keys = KeySet(issuer.url, refetch_interval=INTERVAL, clock=clock)
    old = issuer.key
    assert await keys.key(old.kid) is not None
    new = issuer.rotate(drop_old=True)
    assert await keys.key(new.kid) is None  # within the interval: not fetched yet
    clock.now += INTERVAL
    assert await keys.key(new.kid) == new.jwk
    assert await keys.key(new.kid) == new.jwk
    assert issuer.fetches == 2
    assert await keys.key(old.kid) is None  # withdrawn: dropped with the set it was missing from
    clock.now += jwks.MAX_AGE
    assert await keys.key(new.kid) == new.jwk  # a known key of a stale set: fetched once more
    assert issuer.fetches == 3


@pytest.mark.parametrize("mode", ["down", "slow", "huge"])
async def test_an_issuer_down_slow_or_huge_keeps_the_keys_it_had(
    issuer: AuthServer, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jwks, "FETCH_TIME_LIMIT", 0.5)
    clock = Clock()
    keys = KeySet(issuer.url, refetch_interval=INTERVAL, clock=clock)
    issuer.jwks_mode = mode
    assert await keys.key(issuer.key.kid) is None
    assert await keys.key(issuer.key.kid) is None  # not fetched again within the interval
    assert issuer.fetches == 1
    issuer.jwks_mode = "ok"
    clock.now += INTERVAL
    known = issuer.key
    assert await keys.key(known.kid) == known.jwk
    issuer.jwks_mode = mode
    clock.now += jwks.MAX_AGE  # stale: fetched again, fails, and the keys held stay
    assert await keys.key(known.kid) == known.jwk
    assert issuer.fetches == 3


class Documents(ThreadedWeb):
    """A server answering each path of `served` (filled in once its URL is known) with its JSON, others 404."""

    def __init__(self) -> None:
        self.served: dict[str, Any] = {}

        async def answer(request: Request) -> Response:
            found = self.served.get(request.url.path)
            return JSONResponse(found, status_code=200) if found is not None else Response(status_code=404)

        super().__init__(Starlette(routes=[Route("/{path:path}", answer)]))


async def test_openid_discovery_under_a_path_and_the_issuer_it_names() -> None:
    keys_doc = {"keys": [{"kty": "EC", "crv": "P-256", "kid": "e1", "x": "x", "y": "y"}, {"kty": "oct", "k": "c2Vj"}]}
    with Documents() as web:
        issuer = f"{web.url}/realms/tools"
        web.served["/realms/tools/.well-known/openid-configuration"] = {"issuer": issuer, "jwks_uri": f"{issuer}/certs"}
        web.served["/realms/tools/certs"] = keys_doc
        keys = KeySet(issuer)
        assert await keys.key("e1") == keys_doc["keys"][0]
        assert await keys.key(None) == keys_doc["keys"][0]  # the only signing key: the oct one is never kept


@pytest.mark.parametrize(
    "metadata",
    [
        {"issuer": "https://evil.example.com", "jwks_uri": "{url}/jwks"},
        {"issuer": "{url}", "jwks_uri": "http://evil.example.com/jwks"},
        {"issuer": "{url}"},
    ],
    ids=["another issuer's metadata", "a jwks_uri over plain http elsewhere", "no jwks_uri"],
)
async def test_metadata_that_cannot_be_trusted_gives_no_keys(metadata: dict[str, str]) -> None:
    with Documents() as web:
        web.served["/.well-known/oauth-authorization-server"] = {
            k: v.replace("{url}", web.url) for k, v in metadata.items()
        }
        web.served["/jwks"] = {"keys": [{"kty": "RSA", "kid": "k", "n": "AQAB", "e": "AQAB"}]}
        assert await KeySet(web.url).key("k") is None


def test_discovery_urls_follow_the_mcp_order() -> None:
    assert discovery_urls("https://a.example") == [
        "https://a.example/.well-known/oauth-authorization-server",
        "https://a.example/.well-known/openid-configuration",
    ]
    assert discovery_urls("https://a.example/realms/x/") == [
        "https://a.example/.well-known/oauth-authorization-server/realms/x",
        "https://a.example/.well-known/openid-configuration/realms/x",
        "https://a.example/realms/x/.well-known/openid-configuration",
    ]


@pytest.mark.parametrize(
    "url",
    [
        "https://idp.example.com/realms/tools",
        "https://tenant.eu.auth0.com/",
        "http://127.0.0.1:8080",
        "http://localhost:9000/realms/x",
        "http://[::1]:8080",
        "http://127.5.6.7",
    ],
)
def test_a_usable_issuer_url(url: str) -> None:
    assert checked_url(url, "issuer") == url


@pytest.mark.parametrize(
    "url",
    [
        "http://idp.example.com",
        "http://10.0.0.1/realms/x",
        "ftp://idp.example.com",
        "idp.example.com",
        "https://",
        "https://idp.example.com/?tenant=1",
        "https://idp.example.com/#x",
        "https://user:pw@idp.example.com",
        "https://idp.example.com:99999",
        "https://[::1",
        "",
    ],
)
def test_an_unusable_issuer_url_is_one_line(url: str) -> None:
    with pytest.raises(ConfigError, match=r"^META_AGENT_AUTH_ISSUER: ") as raised:
        resource_server(Settings(auth_issuer=url or " "), resource_url="http://127.0.0.1:8000/mcp")
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    "url",
    [
        "https://idp.example.com/realms/x?key=s3cr3t",
        "https://user:s3cr3t@idp.example.com/realms/x",
        "https://idp.example.com/realms/x#s3cr3t",
        "http://user:s3cr3t@idp.example.com/realms/x",
        "ftp://idp.example.com/realms/x?key=s3cr3t",
    ],
)
def test_an_unusable_issuer_url_is_named_without_what_may_be_its_secret(url: str) -> None:
    with pytest.raises(ConfigError) as raised:
        resource_server(Settings(auth_issuer=url), resource_url="http://127.0.0.1:8000/mcp")
    assert "idp.example.com/realms/x'" in str(raised.value) and "s3cr3t" not in str(raised.value)


def test_the_auth_settings() -> None:
    made = resource_server(
        Settings(auth_issuer="https://idp.example.com/realms/t", auth_scopes="mcp:tools, mcp:read  openid"),
        resource_url="http://127.0.0.1:8000/mcp",
    )
    assert made == ResourceServer(
        issuer="https://idp.example.com/realms/t",
        audience="http://127.0.0.1:8000/mcp",
        scopes=("mcp:tools", "mcp:read", "openid"),
    )
    assert made.metadata_url == "http://127.0.0.1:8000/.well-known/oauth-protected-resource/mcp"
    assert resource_server(Settings(), resource_url=None) is None
    for settings, problem in [
        (Settings(auth_issuer="https://a.example", http_token="t"), "META_AGENT_HTTP_TOKEN and META_AGENT_AUTH_ISSUER"),
        (Settings(auth_audience="https://mcp.example.com/mcp"), "META_AGENT_AUTH_AUDIENCE is set without"),
        (Settings(auth_issuer="https://a.example"), "META_AGENT_AUTH_AUDIENCE: set it"),  # a wildcard --host
        (Settings(auth_issuer="https://a.example", auth_jwks_url="http://a.example/k"), "META_AGENT_AUTH_JWKS_URL: "),
        (Settings(auth_issuer="https://a.example", auth_audience="mcp"), "META_AGENT_AUTH_AUDIENCE: 'mcp' is not"),
    ]:
        with pytest.raises(ConfigError, match=problem):
            resource_server(settings, resource_url=None)
