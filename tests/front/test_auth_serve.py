"""`meta-agent serve --transport http` as an OAuth resource server, as a process: a bad META_AGENT_AUTH_* setting is
one line and exit 2, and the MCP TypeScript SDK's client signs in with OAuth (discovery from the 401, both metadata
documents, dynamic registration, authorization code with PKCE, a token) against the tests' own authorization server
(fixtures/oauth_server.py), then lists the tools and calls one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import TESTS, free_port, http_serving, openai_env
from fake_llm import FakeLLM, openai_reply
from oauth_server import AuthServer

pytestmark = pytest.mark.processes

TS_CLIENT = TESTS / "fixtures" / "ts_oauth_client.mjs"
TS_SDK = TESTS / "node_modules" / "@modelcontextprotocol" / "sdk"
SCOPE = "mcp:tools"
NODE_BOUND = 60  # seconds the TypeScript client may take for its whole sign-in and call


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("auth") / "servers.json"
    path.write_text(json.dumps({"mcpServers": {}}))
    return path


@pytest.fixture(scope="module")
def issuer() -> Iterator[AuthServer]:
    with AuthServer() as server:
        yield server


def serve(config: Path, **env: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "meta_agent", "serve", "--transport", "http", "--port", str(free_port())]
    return subprocess.run(
        [*command, "--config", str(config)], env={**os.environ, **env}, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("env", "line"),
    [
        (
            {"META_AGENT_AUTH_ISSUER": "http://idp.example.com/realms/x"},
            "meta-agent: META_AGENT_AUTH_ISSUER: 'http://idp.example.com/realms/x' must be https (plain http is allowed"
            " to this machine only)\n",
        ),
        (
            {"META_AGENT_AUTH_ISSUER": "idp.example.com"},
            "meta-agent: META_AGENT_AUTH_ISSUER: 'idp.example.com' is not an https URL\n",
        ),
        (
            {"META_AGENT_AUTH_ISSUER": "https://idp.example.com", "META_AGENT_HTTP_TOKEN": "t"},
            "meta-agent: META_AGENT_HTTP_TOKEN and META_AGENT_AUTH_ISSUER are both set: choose one of the two\n",
        ),
    ],
    ids=["plain http elsewhere", "no URL", "with the static token"],
)
def test_a_bad_auth_setting_is_one_line_and_exit_2(config: Path, env: dict[str, str], line: str) -> None:
    result = serve(config, **env)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", line)


def events(stdout: str) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for line in stdout.splitlines():
        event = json.loads(line)
        found.setdefault(event.pop("event"), []).append(event)
    return found


def test_the_typescript_sdk_client_signs_in_and_calls(
    config: Path, issuer: AuthServer, llm_endpoint: FakeLLM, tmp_path: Path
) -> None:
    assert TS_SDK.exists(), "the TypeScript SDK is not installed; run the README's test command"
    env = openai_env(
        llm_endpoint,
        model="openai:fake-model",
        base=os.environ,
        META_AGENT_AUTH_ISSUER=issuer.url,
        META_AGENT_AUTH_SCOPES=SCOPE,
    )
    llm_endpoint.clear()
    llm_endpoint.reply(openai_reply("signed in and answered"))
    with http_serving(config, env) as (url, log):
        command = ["node", str(TS_CLIENT), "--url", f"{url}/mcp", "--tool", "ask", "--args", '{"prompt": "hi"}']
        ran = subprocess.run(command, capture_output=True, text=True, timeout=NODE_BOUND, cwd=tmp_path)
    assert ran.returncode == 0, (ran.stdout, ran.stderr)
    seen = events(ran.stdout)
    assert seen["discovered"][0] == {
        "authorization_server": issuer.url,
        "resource": f"{url}/mcp",
        "scopes_supported": [SCOPE],
    }
    client_id = seen["registered"][0]["client_id"]
    assert client_id in issuer.clients
    assert seen["authorize"][0] == {"resource": f"{url}/mcp", "scope": SCOPE}
    assert seen["token"][0] == {"token_type": "Bearer", "scope": SCOPE}
    assert "unauthorized" in seen
    assert {"ask", "agent"} <= set(seen["tools"][0]["names"])
    assert seen["called"] == [{"isError": False, "text": "signed in and answered"}]
    assert issuer.fetches >= 1  # the server fetched the issuer's keys to check the token
    assert "token_refused" not in "".join(log.lines)  # the first request had no token at all: no refusal logged
