"""Durable runs on PostgreSQL (records/durable.py, design.md §7): real `meta-agent serve --transport http` replicas on
one database, one SIGKILLed in the middle of a run; the other finishes the run from its last completed step, a call
that changed things before the kill is not made again, and the result is read from any replica."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import FAULT_SERVER, ProgressLog, http_serving
from fake_llm import FakeLLM, openai_reply
from mcp import Client
from postgres_cluster import Cluster
from replicas import read_run, replica_environ, serve_replica

from meta_agent.records.database import PostgresDatabase
from meta_agent.records.run_index import RunIndex

pytestmark = pytest.mark.anyio


def servers_json(tmp_path: Path) -> Path:
    config = tmp_path / "servers.json"
    entry = {"command": sys.executable, "args": [str(FAULT_SERVER)], "trust": {"append": "always"}}
    config.write_text(json.dumps({"mcpServers": {"f": entry}}))
    return config


async def run_until_killed(
    url: str,
    task: str,
    killed_when: str,
    doomed: Any,
    *,
    then: Callable[[], Awaitable[None]] | None = None,
    signal: int = 9,
) -> int:
    """Call `agent` on the replica at `url` and send that replica `signal` (SIGKILL) once a progress message says
    `killed_when` (and `then` has returned); its exit status."""
    progress = ProgressLog()

    async def call_and_lose_it() -> None:
        with contextlib.suppress(Exception):  # the connection dies with the replica
            async with Client(url) as client:
                await client.call_tool("agent", {"task": task}, progress_callback=progress)

    async with anyio.create_task_group() as tg:
        tg.start_soon(call_and_lose_it)
        await progress.until(killed_when, timeout=60)
        if then is not None:
            await then()
        doomed.send_signal(signal)
        code: int = await anyio.to_thread.run_sync(doomed.wait, 30)
        tg.cancel_scope.cancel()
    return code


async def done_run(url: str, run_id: str, *, within: float = 60) -> dict[str, Any]:
    async with Client(url) as client:
        with anyio.fail_after(within):
            while (run := await read_run(client, run_id))["status"] != "done":
                await anyio.sleep(0.1)  # polling the run's status, as a caller whose connection died would
    return run


async def test_a_run_whose_replica_is_killed_is_finished_by_the_other_and_its_change_is_made_once(
    database_url: str, pg_cluster: Cluster, llm: FakeLLM, tmp_path: Path
) -> None:
    changes = tmp_path / "changes.txt"
    config = servers_json(tmp_path)
    environ = {**replica_environ(llm, database_url, tmp_path), "META_AGENT_LEASE_SECONDS": "1"}
    llm.reply(openai_reply(None, ("c1", "f__append", {"path": str(changes), "text": "changed"})))
    llm.reply(openai_reply(None, ("c2", "f__slow", {"seconds": 1.5, "steps": 3})))
    llm.reply(openai_reply("All done."))
    doomed, doomed_url, _ = serve_replica(config, environ)
    try:
        with http_serving(config, environ) as (other, _):
            # killed in the slow call, the second tool call: the first, which changed things, has completed
            await run_until_killed(doomed_url, "Change it, then wait.", "step 1 of 3", doomed)
            assert changes.read_text() == "changed\n"
            run_id = pg_cluster.psql(database_url, "select id from runs")
            run = await done_run(f"{other}/mcp", run_id)
            assert run["error"] is None and run["result"]["answer"] == "All done.", run
            calls = [call["name"] for step in run["result"]["steps"] for call in step["tool_calls"]]
            assert calls == ["f.append", "f.slow"]
            assert changes.read_text() == "changed\n"  # made once, by the replica that was killed
            assert len(llm.requests) == 3  # the first two model turns were not asked again
            # the answer landed in its conversation
            conversation = run["result"]["conversation_id"]
            saved = pg_cluster.psql(database_url, f"select messages from conversations where id = '{conversation}'")
            assert json.loads(saved)[-1]["text"] == "All done."
        # and a replica started again (the one killed, say) reads it too
        restarted, restarted_url, _ = serve_replica(config, environ)
        try:
            assert (await done_run(restarted_url, run_id)) == run
        finally:
            restarted.terminate()
            restarted.wait(timeout=30)
            assert restarted.stderr is not None
            restarted.stderr.close()
    finally:
        doomed.kill()
        doomed.wait(timeout=30)
        assert doomed.stderr is not None
        doomed.stderr.close()


async def test_a_run_whose_only_replica_is_killed_reads_interrupted_until_a_replica_starts_again_and_finishes_it(
    database_url: str, pg_cluster: Cluster, llm: FakeLLM, tmp_path: Path
) -> None:
    changes = tmp_path / "changes.txt"
    config = servers_json(tmp_path)
    environ = {**replica_environ(llm, database_url, tmp_path), "META_AGENT_LEASE_SECONDS": "1"}
    llm.reply(openai_reply(None, ("c1", "f__append", {"path": str(changes), "text": "changed"})))
    there = tmp_path / "there"
    llm.reply(openai_reply(None, ("c2", "f__wait_for_file", {"path": str(there)})))
    doomed, doomed_url, _ = serve_replica(config, environ)
    try:
        await run_until_killed(doomed_url, "Change it, then wait.", f"waiting for {there}", doomed)
    finally:
        doomed.kill()
        doomed.wait(timeout=30)
        assert doomed.stderr is not None
        doomed.stderr.close()
    run_id = pg_cluster.psql(database_url, "select id from runs")
    index = RunIndex(PostgresDatabase(database_url), "reader")
    with anyio.fail_after(30):
        while (state := await index.read(run_id)) is not None and state.status == "running":
            await anyio.sleep(0.1)  # until the killed replica's mark lapses (1 s)
    assert state is not None and state.status == "interrupted" and state.result is None
    index.database.close()
    # the wait is made again (it had not completed) and ends at once now; the change is not made again
    there.touch()
    llm.reply(openai_reply("All done."))
    with http_serving(config, environ) as (restarted, log):
        run = await done_run(f"{restarted}/mcp", run_id)
    assert run["error"] is None and run["result"]["answer"] == "All done.", run
    assert changes.read_text() == "changed\n"
    assert len(llm.requests) == 3
    assert log.count("run_resumed") == 1, "".join(line for line in log.lines if "run_" in line)


async def test_a_run_whose_replica_is_stopped_by_a_deploy_is_finished_by_the_other_at_once(
    database_url: str, pg_cluster: Cluster, llm: FakeLLM, tmp_path: Path
) -> None:
    """SIGTERM (a deploy) leaves the replica's runs interrupted, their marks dropped: another replica takes them at
    its next look (a third of META_AGENT_LEASE_SECONDS, 30 here), not once a mark of 30 s has lapsed."""
    changes, there = tmp_path / "changes.txt", tmp_path / "there"
    config = servers_json(tmp_path)
    environ = replica_environ(llm, database_url, tmp_path)
    llm.reply(openai_reply(None, ("c1", "f__append", {"path": str(changes), "text": "changed"})))
    llm.reply(openai_reply(None, ("c2", "f__wait_for_file", {"path": str(there)})))
    llm.reply(openai_reply("All done."))
    stopped, stopped_url, _ = serve_replica(config, environ)
    try:
        with http_serving(config, environ) as (other, log):
            task, waiting = "Change it, then wait.", f"waiting for {there}"
            assert await run_until_killed(stopped_url, task, waiting, stopped, signal=15) == 143
            there.touch()
            run_id = pg_cluster.psql(database_url, "select id from runs")
            run = await done_run(f"{other}/mcp", run_id, within=20)  # 30 s would be the mark lapsing
            assert run["error"] is None and run["result"]["answer"] == "All done.", run
            assert changes.read_text() == "changed\n"
            assert log.count("run_resumed") == 1
    finally:
        stopped.kill()
        stopped.wait(timeout=30)
        assert stopped.stderr is not None
        stopped.stderr.close()


async def test_calls_of_one_turn_meet_their_own_records_when_the_run_is_resumed(
    database_url: str, pg_cluster: Cluster, llm: FakeLLM, tmp_path: Path
) -> None:
    """The model's two calls run at once; the second (a change) completes while the first waits. Resumed on the
    other replica, the change gets its record back and the wait is made again, whatever order they run in."""
    changes, there = tmp_path / "changes.txt", tmp_path / "there"
    config = servers_json(tmp_path)
    environ = {**replica_environ(llm, database_url, tmp_path), "META_AGENT_LEASE_SECONDS": "1"}
    llm.reply(
        openai_reply(
            None,
            ("c1", "f__wait_for_file", {"path": str(there)}),
            ("c2", "f__append", {"path": str(changes), "text": "changed"}),
        )
    )
    llm.reply(openai_reply("All done."))
    doomed, doomed_url, _ = serve_replica(config, environ)
    recorded = "select count(*) from dbos.operation_outputs where function_name = 'tool f.append'"
    try:
        with http_serving(config, environ) as (other, log):

            async def change_recorded() -> None:
                with anyio.fail_after(30):
                    while pg_cluster.psql(database_url, recorded) != "1":
                        await anyio.sleep(0.05)  # until the change's step is recorded

            await run_until_killed(doomed_url, "Wait and change.", f"waiting for {there}", doomed, then=change_recorded)
            there.touch()
            run = await done_run(f"{other}/mcp", pg_cluster.psql(database_url, "select id from runs"))
            assert run["error"] is None and run["result"]["answer"] == "All done.", run
            [step, _] = run["result"]["steps"]
            assert [(call["name"], call["ok"]) for call in step["tool_calls"]] == [
                ("f.wait_for_file", True),
                ("f.append", True),
            ]
            assert changes.read_text() == "changed\n"
            assert log.count("run_resumed") == 1
    finally:
        doomed.kill()
        doomed.wait(timeout=30)
        assert doomed.stderr is not None
        doomed.stderr.close()
