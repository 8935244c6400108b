"""META_AGENT_MAX_TASKS is a limit per replica (issue 47; docs/tasks.md): two `meta-agent serve --transport http`
replicas on one PostgreSQL database, each with a limit of 5, each hit by a burst of task-augmented calls at once in
raw JSON-RPC over HTTP (2026-07-28 requests on one, one 2025-11-25 session on the other). Each starts exactly 5, so
the two run 10 between them; every other call is refused in one line, and none of them left a task or a run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from fake_llm import FakeLLM
from replicas import replica_environ, replicas
from task_hosts import LEGACY, MODERN, TERMINAL, Caller, caller
from test_task_limits import Burst, held, wait_for

pytestmark = pytest.mark.anyio

LIMIT = 5
BURST = 100  # calls at once to each replica
REFUSED = f"{LIMIT} tasks already run (META_AGENT_MAX_TASKS); wait for one to end, or cancel one"


async def burst(host: Caller, seen: Burst) -> None:
    """BURST calls of `agent` as tasks, all at once, in `host`'s era."""

    async def one(n: int) -> None:
        params: dict[str, Any] = {"name": "agent", "arguments": {"task": f"burst {n}"}}
        answer = await host.send("tools/call", params if host.era == MODERN else {**params, "task": {}})
        if "error" in answer:
            seen.refused.append(answer["error"]["message"])
        else:
            made = answer["result"] if host.era == MODERN else answer["result"]["task"]
            seen.made.append(made["taskId"])

    async with anyio.create_task_group() as calls:
        for n in range(BURST):
            calls.start_soon(one, n)


def rows(database_url: str, table: str) -> int:
    with psycopg.connect(database_url) as db:
        found = db.execute(f"select count(*) from {table}").fetchone()
    assert found is not None
    return int(found[0])


async def test_each_replica_keeps_its_own_limit_under_a_burst(database_url: str, llm: FakeLLM, tmp_path: Path) -> None:
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {}}))
    environ = {**replica_environ(llm, database_url, tmp_path), "META_AGENT_MAX_TASKS": str(LIMIT)}
    seen = {MODERN: Burst(), LEGACY: Burst()}
    with (
        held(llm, 2 * LIMIT) as gate,
        replicas(config, environ, 2) as [(_, first, _), (_, second, _)],
    ):
        async with caller(first, MODERN) as new, caller(second, LEGACY) as old:
            async with anyio.create_task_group() as both:
                both.start_soon(burst, new, seen[MODERN])
                both.start_soon(burst, old, seen[LEGACY])
            await wait_for(lambda: len(llm.requests) == 2 * LIMIT)  # each task's run at its model turn
            gate.set()  # the tasks end
            for host in (new, old):
                for task_id in seen[host.era].made:
                    await host.until(task_id, lambda read: read["status"] in TERMINAL)
    for era in (MODERN, LEGACY):
        assert len(seen[era].made) == LIMIT, era
        assert seen[era].refused == [REFUSED] * (BURST - LIMIT), era
    assert rows(database_url, "tasks") == rows(database_url, "runs") == 2 * LIMIT
