"""`meta-agent serve` as hosts meet it: a real stdio subprocess and a real HTTP server, in both protocol eras."""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as t
import pytest
from conftest import EVERYTHING, FAULT_SERVER, ProgressLog, ServerLog, cancel_while_hanging, http_serving, openai_env
from fake_llm import FakeLLM, openai_reply
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from raw_stdio import Era, raw_serving

from meta_agent import __version__

pytestmark = pytest.mark.anyio
TOKEN = "test-token-123"
# --allowed-host values of the HTTP server below: any case as given, any port unless one is named.
ALLOWED_HOSTS = ["MCP.example.com", "proxy.example:9000", "::2"]


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("serve") / "servers.json"
    servers = {
        "f": {"command": sys.executable, "args": [str(FAULT_SERVER), "--garbage"]},  # also prints to its stdout
        "every": {"command": "node", "args": [str(EVERYTHING), "stdio"]},  # prints a banner on its stderr
    }
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


async def agent_round(client: Client, llm: FakeLLM) -> None:
    llm.reply(openai_reply(None, ("c1", "every__echo", {"message": "hi"})))
    llm.reply(openai_reply("echoed"))
    progress = ProgressLog()
    result = await client.call_tool("agent", {"task": "echo hi"}, progress_callback=progress)
    assert not result.is_error, result.content
    assert result.content[0].text == "echoed"  # type: ignore[union-attr]
    assert result.structured_content and result.structured_content["steps"][0]["tool_calls"][0]["name"] == "every.echo"
    assert progress.messages[-1] == "done · final (2 model calls, 1 tool call)"
    assert 'step 1 · call every.echo {"message": "hi"}' in progress.messages


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_stdio_subprocess(mode: str, llm: FakeLLM, config: Path) -> None:
    """Nothing but protocol on stdout, though children print to their stdout and stderr."""
    stray: list[Exception] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, Exception):
            stray.append(message)

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "meta_agent", "serve", "--config", str(config)],
        env=openai_env(llm, model="openai:fake-model", base=os.environ),
    )
    async with Client(params, mode=mode, message_handler=on_message) as client:
        assert client.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
        assert client.server_info and client.server_info.name == "meta-agent"
        await agent_round(client, llm)
        box = json.loads((await client.read_resource("meta-agent://toolbox")).contents[0].text)  # type: ignore[union-attr]
        assert {s["name"]: s["status"] for s in box["servers"]} == {"f": "ready", "every": "ready"}
    assert stray == []


@pytest.fixture(scope="module")
def http_server(llm_endpoint: FakeLLM, config: Path) -> Iterator[tuple[str, ServerLog]]:
    environ = openai_env(llm_endpoint, model="openai:fake-model", base=os.environ, META_AGENT_HTTP_TOKEN=TOKEN)
    with http_serving(config, environ, *(arg for host in ALLOWED_HOSTS for arg in ("--allowed-host", host))) as served:
        yield served


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_http(mode: str, http_server: tuple[str, ServerLog], llm: FakeLLM) -> None:
    url, _ = http_server
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http), mode=mode) as client,
    ):
        assert client.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
        await agent_round(client, llm)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_http_cancel_reaches_the_child(mode: str, http_server: tuple[str, ServerLog], llm: FakeLLM) -> None:
    """The caller gives up (closing the stream, or notifications/cancelled): the child's call is cancelled too."""
    url, log = http_server
    already = log.count("hang cancelled")
    headers = {"Authorization": f"Bearer {TOKEN}"}
    llm.reply(openai_reply(None, ("c1", "f__hang", {})))
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http), mode=mode) as client,
    ):
        await cancel_while_hanging(client)
    await anyio.to_thread.run_sync(lambda: log.wait_for("hang cancelled", more_than=already))
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        health = (await http.get(f"{url}/health")).json()
    assert health["children"] == {"f": "ready", "every": "ready"}


async def test_http_security(http_server: tuple[str, ServerLog]) -> None:
    url, _ = http_server
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    good = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient() as http:
        health = await http.get(f"{url}/health")  # without the token: up or not, and nothing else
        assert (health.status_code, health.json()) == (200, {"status": "ok"})
        for authorization in ["Bearer nope", f"Basic {TOKEN}", f"Bearer {TOKEN}x"]:
            health = await http.get(f"{url}/health", headers={"Authorization": authorization})
            assert (health.status_code, health.json()) == (200, {"status": "ok"}), authorization
        health = (await http.get(f"{url}/health", headers={"Authorization": f"bearer {TOKEN}"})).json()
        assert (health["status"], health["version"], set(health["children"])) == ("ok", __version__, {"f", "every"})
        no_token = await http.post(f"{url}/mcp", json=body, headers={"Accept": good["Accept"]})
        assert no_token.status_code == 401
        assert no_token.headers["www-authenticate"] == "Bearer"
        wrong = await http.post(f"{url}/mcp", json=body, headers={**good, "Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        bad_host = await http.post(f"{url}/mcp", json=body, headers={**good, "Host": "evil.example:80"})
        assert bad_host.status_code == 421
        bad_origin = await http.post(f"{url}/mcp", json=body, headers={**good, "Origin": "http://evil.example"})
        assert bad_origin.status_code == 403
        # The 2026-07-28 route checks on its own. (A bare discover gets past the guards and is then judged by the
        # MCP layer itself; the bearer scheme may be written in any case.)
        modern = {**good, "MCP-Protocol-Version": "2026-07-28", "Authorization": f"bearer {TOKEN}"}
        discover = {"jsonrpc": "2.0", "id": 2, "method": "server/discover"}

        async def status(headers: dict[str, str]) -> int:
            return (await http.post(f"{url}/mcp", json=discover, headers=headers)).status_code

        assert await status(modern) not in (401, 403, 421)
        assert await status({**modern, "Authorization": "Bearer nope"}) == 401
        assert await status({**modern, "Host": "evil.example"}) == 421
        assert await status({**modern, "Origin": "http://evil.example"}) == 403


async def test_health_answers_any_host_and_tells_details_only_to_an_allowed_one(
    http_server: tuple[str, ServerLog],
) -> None:
    """A probe names the server by an address of its own (a pod's IP): it hears that the server is up, and no more.
    The version and the children go only to a Host and Origin the guard answers, with the token."""
    url, _ = http_server
    port = url.rsplit(":", 1)[1]
    token = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx2.AsyncClient() as http:

        async def health(headers: dict[str, str]) -> tuple[int, Any]:
            response = await http.get(f"{url}/health", headers=headers)
            return response.status_code, response.json()

        for host in [f"10.1.2.3:{port}", "evil.example", f"localhost.evil.example:{port}"]:
            assert await health({"Host": host}) == (200, {"status": "ok"}), host
            assert await health({"Host": host, **token}) == (200, {"status": "ok"}), host
        hostile_origin = {"Origin": "http://evil.example", **token}
        assert await health(hostile_origin) == (200, {"status": "ok"})
        for host in [f"127.0.0.1:{port}", f"LOCALHOST:{port}"]:
            status, body = await health({"Host": host, **token})
            assert (status, body["version"], set(body["children"])) == (200, __version__, {"f", "every"}), host


def test_http_binds_loopback_by_default(http_server: tuple[str, ServerLog]) -> None:
    """The server was started without --host: its listening socket is on 127.0.0.1 only."""
    port = int(http_server[0].rsplit(":", 1)[1])
    listening = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, port_hex = local.rsplit(":", 1)
            if int(port_hex, 16) == port and state == "0A":  # 0A: LISTEN
                listening.append(address)
    assert listening == ["0100007F"]  # 127.0.0.1, little-endian hex


@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.parametrize("can_ask", [True, False], ids=["asked", "cannot-ask"])
async def test_http_approval(mode: str, can_ask: bool, http_server: tuple[str, ServerLog], llm: FakeLLM) -> None:
    """Over real HTTP in both eras: a destructive call runs only with the user's yes; without a way to ask, never."""
    url, _ = http_server
    asked: list[str] = []

    async def user(_ctx: Any, params: Any) -> t.ElicitResult:
        asked.append(params.message)
        return t.ElicitResult(action="accept", content={"decision": "allow_once"})

    llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": "/srv/x"})))
    llm.reply(openai_reply("handled"))
    options = {"elicitation_callback": user} if can_ask else {}
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http:
        transport = streamable_http_client(f"{url}/mcp", http_client=http)
        async with Client(transport, mode=mode, **options) as client:
            result = await client.call_tool("agent", {"task": "delete /srv/x"})
    assert result.content[0].text == "handled"  # type: ignore[union-attr]
    told = llm.requests[-1].body["messages"][-1]["content"]
    if can_ask:
        assert (len(asked), told) == (1, "deleted /srv/x")
    else:
        assert told.startswith("[error] f.delete_file needs the user's approval and this caller cannot be asked")


def raw_status(url: str, path: str, headers: list[tuple[str, str]], *, era: str) -> int:
    """The status of one HTTP/1.1 request written byte for byte (an HTTP client would tidy odd Host values up)."""
    body = b""
    if path == "/mcp":
        method = "server/discover" if era == "2026-07-28" else "ping"
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method}).encode()
        headers = [("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream"), *headers]
        if era == "2026-07-28":
            headers.append(("MCP-Protocol-Version", "2026-07-28"))
    request = [f"{'POST' if body else 'GET'} {path} HTTP/1.1", *(f"{name}: {value}" for name, value in headers)]
    request += [f"Authorization: Bearer {TOKEN}", f"Content-Length: {len(body)}", "Connection: close", "", ""]
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall("\r\n".join(request).encode("latin-1") + body)
        status_line = sock.makefile("rb").readline()
    return int(status_line.split()[1])


# Each is refused: not host[:port] as a browser writes it, or not a name this server answers to.
HOSTILE_HOSTS = [
    "localhost:80@evil.example",
    "localhost.evil.example",
    "127.0.0.1.evil.example:{port}",
    "127.0.0.1:{port}/../x",
    "[::1]x",
    "[::1]:{port}x",
    "",
    "user@localhost:{port}",
    "localhost:{port}:{port}",
    "localhost:0{port}",
    "localhost:99999",
    "localhost.:{port}",
    "localhost:",
    "evil.example",
    "mcp.example.com.evil.example",
    "proxy.example:9001",
    "proxy.example",
    "[::2%eth0]",
]
ALLOWED = ["127.0.0.1:{port}", "localhost", "localhost:{port}", "[::1]:{port}", "mcp.example.com", "[::2]:1"]
ALLOWED += ["mcp.example.com:443", "proxy.example:9000", "LOCALHOST:{port}", "Mcp.Example.COM", "[::2]"]
HOSTILE_ORIGINS = [
    "http://evil.example",
    "http://localhost:80@evil.example",
    "http://localhost.evil.example",
    "https://127.0.0.1.evil.example",
    "null",
    "",
    "file://",
    "http://localhost/",
    "http://user@localhost",
    "ftp://localhost",
    "http://localhost:{port}:{port}",
    "http://localhost.",
    "http://proxy.example",
]
ALLOWED_ORIGINS = ["http://localhost:{port}", "https://127.0.0.1", "http://[::1]:6274", "https://mcp.example.com"]
ALLOWED_ORIGINS += ["http://proxy.example:9000", "HTTP://LOCALHOST"]
ROUTES = [("/mcp", "legacy"), ("/mcp", "2026-07-28"), ("/elsewhere", "any")]


def test_host_and_origin_are_compared_exactly(http_server: tuple[str, ServerLog]) -> None:
    """Over real HTTP, on /mcp in both eras and on any other path but /health: a hostile Host gets 421 and a hostile
    Origin 403, while the names the server answers to (loopback, --allowed-host; in any case) pass."""
    url, _ = http_server
    port = url.rsplit(":", 1)[1]
    local = ("Host", f"127.0.0.1:{port}")
    for path, era in ROUTES:

        def status(*headers: tuple[str, str], path: str = path, era: str = era) -> int:
            return raw_status(url, path, list(headers), era=era)

        for host in HOSTILE_HOSTS:
            assert status(("Host", host.format(port=port))) == 421, (path, era, host)
        assert status(local, local) in (400, 421), (path, era, "two Host headers")  # uvicorn's parser says 400 first
        for host in ALLOWED:
            assert status(("Host", host.format(port=port))) not in (401, 403, 421), (path, era, host)
        for origin in HOSTILE_ORIGINS:
            assert status(local, ("Origin", origin.format(port=port))) == 403, (path, era, origin)
        for origin in ALLOWED_ORIGINS:
            assert status(local, ("Origin", origin.format(port=port))) not in (401, 403, 421), (path, era, origin)


# Lines a host gets wrong on stdio, and the (code, id) each is owed, as JSON-RPC 2.0 says (section 5).
BAD_STDIO_LINES: list[tuple[bytes, tuple[int, int | None]]] = [
    (b"not json", (-32700, None)),
    (b"42", (-32600, None)),
    (b"[]", (-32600, None)),
    (b'{"jsonrpc":"2.0","id":7,"method":"tools/list","params":[]}', (-32602, 7)),
    (b'{"jsonrpc":"2.0","id":8}', (-32600, 8)),
    (b'{"id":9,"method":"tools/list"}', (-32600, 9)),
]


@pytest.mark.parametrize("moment", ["before_handshake", "after_handshake"])
@pytest.mark.parametrize("era", ["2025-11-25", "2026-07-28"])
async def test_stdio_answers_each_line_that_is_no_message(era: Era, moment: str, tmp_path: Path) -> None:
    """Over raw stdio, as over HTTP, a line that is no JSON-RPC message gets an error answer (id null where none can
    be read), the caller is not left waiting, and the pipe goes on serving: a valid request after it is answered."""
    async with raw_serving(tmp_path, era, dict(os.environ)) as host:
        if moment == "after_handshake":
            await host.handshake()
        for line, (code, request_id) in BAD_STDIO_LINES:
            await host.write(line + b"\n")
            answer = await host.message()
            assert (answer["error"]["code"], answer["id"]) == (code, request_id), (line, answer)
        if moment == "before_handshake":
            await host.handshake()
        assert {"ask", "plan", "agent"} <= await host.tool_names()
        assert host.process.stdin is not None
        await host.process.stdin.aclose()
        assert await host.exit_code() == 0
        assert await host.rest() == []
