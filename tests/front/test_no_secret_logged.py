"""No secret in a log line: `meta-agent serve --transport http`, as a process, writes no query and no user info of any
URL, while the paths are still there to read. A client that wrongly puts its token in the query (`?access_token=`) of
/mcp, /health and the console's pages, with and without credentials, without auth, with the static token and with
OAuth; the console's one-time sign-in code and an OAuth callback's code and state, real ones; a request line in
absolute form with user info; and children whose servers.json URLs carry a key in their query and user info, one that
answers (every request of it is logged by httpx2) and one that cannot be reached (its failure is logged, and retried)."""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx2
import pytest
from conftest import ServerLog, free_port, http_serving, openai_env
from fake_llm import FakeLLM
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from oauth_server import AuthServer

pytestmark = pytest.mark.processes

SECRET = "s3cr3t-never-logged"
TOKEN = "the-static-token-of-this-test"
CLIENT_ID = "console-client"
MODEL = "openai:fake-model"
WAIT = 30  # seconds for any one answer or line
# Every request below holds SECRET in its query; each path is then looked for in the access log, as it was asked.
PATHS = ["/health", "/mcp", "/ui", "/ui/sign-in", "/ui/callback", "/ui/api/app_runs"]


@pytest.fixture(scope="module")
def issuer() -> Iterator[AuthServer]:
    with AuthServer() as server:
        yield server


@pytest.fixture(scope="module")
def down_port() -> int:
    return free_port()  # nothing listens there


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory, everything_http: str, down_port: int) -> Path:
    up = everything_http.replace("http://", f"http://someone:{SECRET}@") + f"?token={SECRET}#{SECRET}"
    down = f"http://someone:{SECRET}@127.0.0.1:{down_port}/mcp?token={SECRET}"
    path = tmp_path_factory.mktemp("log-urls") / "servers.json"
    path.write_text(json.dumps({"mcpServers": {"up": {"url": up}, "down": {"url": down}}}))
    return path


def credentials(auth: str, issuer: AuthServer, url: str) -> dict[str, str]:
    if auth == "token":
        return {"Authorization": f"Bearer {TOKEN}"}
    if auth == "oauth":
        return {"Authorization": f"Bearer {issuer.mint(sub='alice', aud=f'{url}/mcp')}"}
    return {}


@pytest.mark.parametrize("auth", ["none", "token", "oauth"])
def test_no_query_or_user_info_is_logged_and_every_path_is(
    auth: str, config: Path, issuer: AuthServer, llm_endpoint: FakeLLM, everything_http: str, down_port: int
) -> None:
    env = openai_env(llm_endpoint, model=MODEL, base=os.environ)
    if auth == "token":
        env["META_AGENT_HTTP_TOKEN"] = TOKEN
    if auth == "oauth":
        env.update(META_AGENT_AUTH_ISSUER=issuer.url, META_AGENT_UI_CLIENT_ID=CLIENT_ID)
    with http_serving(config, env) as (url, log):
        given = credentials(auth, issuer, url)
        asked_with_the_secret(url, given)
        anyio.run(listed_with_the_secret, url, given)
        absolute_form(url)
        used = signed_in_with_a_real_code(auth, url, issuer, log)
        for path in PATHS:
            log.wait_for(f"GET {path} HTTP/1.1", timeout=WAIT)
        log.wait_for("POST /mcp HTTP/1.1", timeout=WAIT)
        log.wait_for(f"GET {url}/health HTTP/1.1", timeout=WAIT)  # the absolute form, without its user info
        log.wait_for(f"cannot reach http://127.0.0.1:{down_port}/mcp: ", timeout=WAIT)
        log.wait_for(f"HTTP Request: POST {everything_http} ", timeout=WAIT)
    logged = [line for line in log.lines if not line.startswith("meta-agent: ")]  # lines said to the operator
    assert all(json.loads(line) for line in logged)
    for secret in [SECRET, *used]:
        assert not [line for line in logged if secret in line]


def asked_with_the_secret(url: str, given: dict[str, str]) -> None:
    """What a client that puts its token in the query asks, with the credentials it has and without."""
    query = f"?access_token={SECRET}"
    accept = {"Accept": "application/json, text/event-stream"}
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    with httpx2.Client(timeout=WAIT) as http:
        for headers in ({}, given):
            assert http.get(f"{url}/health{query}", headers=headers).status_code == 200
            http.post(f"{url}/mcp{query}", json=ping, headers={**accept, **headers})
            http.get(f"{url}/mcp{query}", headers={**accept, **headers})
            http.get(f"{url}/ui{query}", headers=headers)
            http.get(f"{url}/ui/api/app_runs{query}", headers=headers)
        http.get(f"{url}/ui/sign-in?code={SECRET}")
        http.get(f"{url}/ui/callback?code={SECRET}&state={SECRET}")


async def listed_with_the_secret(url: str, given: dict[str, str]) -> None:
    """The SDK's own client, told a /mcp URL with the token in its query (and the credentials in the header)."""
    async with (
        httpx2.AsyncClient(headers=given, timeout=WAIT) as http,
        Client(streamable_http_client(f"{url}/mcp?access_token={SECRET}", http_client=http)) as client,
    ):
        names = {tool.name for tool in (await client.list_tools()).tools}
    assert {"ask", "agent"} <= names


def absolute_form(url: str) -> None:
    """A request line with the whole URL in it, user info and query (RFC 9112 allows the absolute form)."""
    host = url.removeprefix("http://")
    line = f"GET http://someone:{SECRET}@{host}/health?access_token={SECRET} HTTP/1.1\r\nHost: {host}\r\n"
    with socket.create_connection(("127.0.0.1", int(host.rsplit(":", 1)[1])), timeout=WAIT) as sock:
        sock.sendall(f"{line}Connection: close\r\n\r\n".encode())
        assert sock.recv(100).startswith(b"HTTP/1.1 ")


def signed_in_with_a_real_code(auth: str, url: str, issuer: AuthServer, log: ServerLog) -> list[str]:
    """The credentials the console's sign-in passes in a query, used as a browser uses them; [] without auth."""
    if auth == "token":
        log.wait_for("sign in to the web console", timeout=WAIT)
        (link,) = [found[1] for line in log.lines if (found := re.search(r"(http://\S+/ui/sign-in\?code=\S+)", line))]
        with httpx2.Client(timeout=WAIT) as browser:
            assert browser.get(link).status_code == 303
        return [link.rsplit("=", 1)[1]]
    if auth == "oauth":
        issuer.clients[CLIENT_ID] = {"client_id": CLIENT_ID, "redirect_uris": [f"{url}/ui/callback"]}
        with httpx2.Client(timeout=WAIT, follow_redirects=True) as browser:
            done = browser.get(f"{url}/ui/sign-in")
        assert done.status_code == 200 and "Signed in" in done.text, done.text
        back = httpx2.URL(done.history[-1].headers["location"])
        return [back.params["code"], back.params["state"]]
    return []
