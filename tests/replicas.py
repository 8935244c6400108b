"""Replicas of `meta-agent serve --transport http` on one PostgreSQL database, as the tests of the shared state start
them, and a run read back through the resource `meta-agent://runs/{run_id}`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import anyio
from conftest import FAULT_SERVER, ServerLog, free_port, openai_env
from fake_llm import FakeLLM
from mcp import Client


def fault_config(tmp_path: Path, trust: dict[str, str] | None = None) -> Path:
    """A servers.json in `tmp_path` whose one child `f` is the fault server (with `trust` levels, if given)."""
    entry: dict[str, Any] = {"command": sys.executable, "args": [str(FAULT_SERVER)]}
    if trust:
        entry["trust"] = trust
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"f": entry}}))
    return config


def replica_environ(llm: FakeLLM, database_url: str, tmp_path: Path) -> dict[str, str]:
    return openai_env(
        llm,
        model="openai:fake-model",
        base={
            **os.environ,
            "META_AGENT_DATABASE_URL": database_url,
            "META_AGENT_TRACE_DIR": str(tmp_path),
            "META_AGENT_CONVERSATIONS_DB": str(tmp_path / "unused.sqlite3"),
        },
    )


Replica = tuple[subprocess.Popen[str], str, ServerLog]


@contextmanager
def replica(config: Path, environ: dict[str, str]) -> Iterator[Replica]:
    """A replica the test may kill or stop itself: its process, its MCP URL and its log, once it listens; killed, if
    it still runs, and reaped when the block ends."""
    with _started(config, environ) as started:
        started[2].wait_for("serving_http")
        yield started


@contextmanager
def replicas(config: Path, environ: dict[str, str], count: int) -> Iterator[list[Replica]]:
    """`count` replicas as `replica` makes one, started at once (a start is mostly imports and the database)."""
    with ExitStack() as stack:
        started = [stack.enter_context(_started(config, environ)) for _ in range(count)]
        for _, _, log in started:
            log.wait_for("serving_http")
        yield started


@contextmanager
def _started(config: Path, environ: dict[str, str]) -> Iterator[Replica]:
    port = free_port()
    command = [sys.executable, "-m", "meta_agent", "serve", "--transport", "http", "--port", str(port)]
    proc = subprocess.Popen([*command, "--config", str(config)], env=environ, stderr=subprocess.PIPE, text=True)
    try:
        yield proc, f"http://127.0.0.1:{port}/mcp", ServerLog(proc.stderr)
    finally:
        proc.kill()
        proc.wait(timeout=30)
        assert proc.stderr is not None
        proc.stderr.close()


async def read_run(client: Client, run_id: str) -> dict[str, Any]:
    contents = (await client.read_resource(f"meta-agent://runs/{run_id}")).contents
    return json.loads(contents[0].text)  # type: ignore[union-attr]


async def done_run(url: str, run_id: str, *, within: float = 60) -> dict[str, Any]:
    """The run read through the replica at `url` once it is done."""
    async with Client(url) as client:
        with anyio.fail_after(within):
            while (run := await read_run(client, run_id))["status"] != "done":
                await anyio.sleep(0.1)  # polling the run's status, as a caller whose connection died would
    return run
