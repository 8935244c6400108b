"""Parked runs are bounded (issue 29): a flood of 2026-07-28 calls whose runs park for an approval and are never
answered, against a real `meta-agent serve --transport http` whose process may open at most 1,024 files, by raw HTTP
posts (an SDK client per call would cost the test more than the server). The model is the fake one on 127.0.0.1; it
asks for the fault child's `delete_file`, an `ask`-level tool."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import psutil
import pytest
from conftest import fault_entry, free_port, openai_env
from fake_llm import FakeLLM, openai_reply

pytestmark = pytest.mark.anyio

FD_LIMIT = 1024  # `ulimit -n 1024`, the common default
ATTEMPTS = 2000
DEFAULT_MAX_PARKED = 1000
CONCURRENCY = 8  # calls in flight at once: the test's own descriptors stay few
# What the server may hold open after the flood: its own (listening socket, event loop, log, database, children's
# pipes, a few connections), nothing per parked run. Today's code holds one per parked run.
FD_BOUND = 200
CALL_TIMEOUT = 60.0  # seconds for one call: generous on a loaded machine; a server out of descriptors never answers
START_BOUND = 60.0
TOKEN = "flood-token"
PARK, AFTER = "[park]", "[after]"
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
}
HEADERS = {
    "Authorization": f"Bearer {TOKEN}",
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
    "Mcp-Protocol-Version": "2026-07-28",
    "Mcp-Method": "tools/call",
    "Mcp-Name": "agent",
}


@pytest.fixture
def limited_server(tmp_path: Path, llm: FakeLLM) -> Iterator[tuple[str, psutil.Process]]:
    """`meta-agent serve --transport http` under `ulimit -n 1024`, with the fault child: its /mcp URL and process."""
    config = tmp_path / "servers.json"
    fault = fault_entry()
    config.write_text(json.dumps({"mcpServers": {"f": {"command": fault.command, "args": list(fault.args)}}}))
    environ = openai_env(
        llm,
        model="openai:fake-model",
        base=os.environ,
        META_AGENT_HTTP_TOKEN=TOKEN,
        META_AGENT_TRACE_DIR=str(tmp_path / "traces"),
        META_AGENT_CONVERSATIONS_DB=str(tmp_path / "c.db"),
    )
    port = free_port()
    log = tmp_path / "serve.log"
    command = [sys.executable, "-m", "meta_agent", "serve", "--transport", "http", "--port", str(port)]
    with log.open("w") as stderr:
        proc = subprocess.Popen([*command, "--config", str(config)], env=environ, stderr=stderr)
    try:
        # `ulimit -n 1024` from its first moments on, while it still imports (no preexec_fn: this process has threads)
        resource.prlimit(proc.pid, resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))
        deadline = time.monotonic() + START_BOUND
        while "serving_http" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.05)
        server = psutil.Process(proc.pid)
        assert server.rlimit(psutil.RLIMIT_NOFILE) == (FD_LIMIT, FD_LIMIT)
        yield f"http://127.0.0.1:{port}/mcp", server
    finally:
        proc.kill()  # 1,000 runs parked for 10 minutes: no graceful stop is being tested here
        proc.wait(timeout=30)


async def call_agent(http: httpx2.AsyncClient, url: str, n: int, task: str) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": "agent", "arguments": {"task": task}}}
    body["params"]["_meta"] = META
    response = await http.post(url, json=body)
    assert response.status_code == 200, (n, response.status_code, response.text[:300])
    result: dict[str, Any] = response.json()["result"]
    return result


def outcome(result: dict[str, Any]) -> str:
    """ "parked", or the text of a tool error."""
    if result.get("resultType") == "input_required":
        return "parked"
    assert result.get("isError"), result
    return str(result["content"][0]["text"])


async def test_a_flood_of_parked_runs_leaves_the_server_serving(
    limited_server: tuple[str, psutil.Process], llm: FakeLLM
) -> None:
    url, server = limited_server
    for _ in range(ATTEMPTS):
        llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": "/a"})), match=PARK)
    seen: Counter[str] = Counter()
    numbers = iter(range(ATTEMPTS))
    timeout = httpx2.Timeout(CALL_TIMEOUT)
    limits = httpx2.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)

    async def attempt_all(http: httpx2.AsyncClient) -> None:
        for n in numbers:  # shared by the workers: each attempt is made once
            seen[outcome(await call_agent(http, url, n, f"{PARK} {n}"))] += 1

    async with httpx2.AsyncClient(headers=HEADERS, timeout=timeout, limits=limits) as http:
        async with anyio.create_task_group() as tg:
            for _ in range(CONCURRENCY):
                tg.start_soon(attempt_all, http)
        assert server.num_fds() < FD_BOUND  # nothing held per parked run
        assert seen.pop("parked") == DEFAULT_MAX_PARKED, seen
        ((refusal, refused),) = seen.items()  # every other attempt got the same one line
        assert refused == ATTEMPTS - DEFAULT_MAX_PARKED
        assert "\n" not in refusal and "META_AGENT_MAX_PARKED" in refusal and "1,000 runs" in refusal, refusal
        # New calls still work: one that needs no answer completes, and the server's health answers.
        llm.reply(openai_reply("still here"), match=AFTER)
        after = await call_agent(http, url, ATTEMPTS, AFTER)
        assert not after.get("isError") and after["content"][0]["text"] == "still here", after
        health = await http.get(url.removesuffix("/mcp") + "/health")
        assert health.status_code == 200
