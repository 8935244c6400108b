"""Durable runs on PostgreSQL (durable/runs.py; README, Replicas on PostgreSQL): real `meta-agent serve --transport http` replicas on
one database, one SIGKILLed in the middle of a run; the other finishes the run from its last completed step, a call
that changed things before the kill is not made again, and the result is read from any replica."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import FAULT_SERVER, ProgressLog, http_serving, openai_env
from fake_llm import FakeLLM, openai_reply
from mcp import Client
from postgres_cluster import Cluster
from replicas import done_run, fault_config, replica, replica_environ

from meta_agent.config.servers import ServerEntry, load_servers
from meta_agent.config.settings import Settings
from meta_agent.durable.format import APPLICATION_VERSION
from meta_agent.engine import Engine
from meta_agent.errors import ConfigError
from meta_agent.store.database import PostgresDatabase
from meta_agent.store.run_index import NOT_RESUMABLE, RunIndex

pytestmark = pytest.mark.anyio


def servers_json(tmp_path: Path) -> Path:
    return fault_config(tmp_path, {"append": "always"})


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


async def test_a_run_whose_replica_is_killed_is_finished_by_the_other_and_its_change_is_made_once(
    database_url: str, pg_cluster: Cluster, llm: FakeLLM, tmp_path: Path
) -> None:
    changes = tmp_path / "changes.txt"
    config = servers_json(tmp_path)
    environ = {**replica_environ(llm, database_url, tmp_path), "META_AGENT_LEASE_SECONDS": "1"}
    llm.reply(openai_reply(None, ("c1", "f__append", {"path": str(changes), "text": "changed"})))
    llm.reply(openai_reply(None, ("c2", "f__slow", {"seconds": 1.5, "steps": 3})))
    llm.reply(openai_reply("All done."))
    with replica(config, environ) as (doomed, doomed_url, _), http_serving(config, environ) as (other, _):
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
    with replica(config, environ) as (_, restarted_url, _):
        assert (await done_run(restarted_url, run_id)) == run


async def test_a_run_whose_only_replica_is_killed_reads_interrupted_until_a_replica_starts_again_and_finishes_it(
    database_url: str, pg_cluster: Cluster, llm: FakeLLM, tmp_path: Path
) -> None:
    changes = tmp_path / "changes.txt"
    config = servers_json(tmp_path)
    environ = {**replica_environ(llm, database_url, tmp_path), "META_AGENT_LEASE_SECONDS": "1"}
    llm.reply(openai_reply(None, ("c1", "f__append", {"path": str(changes), "text": "changed"})))
    there = tmp_path / "there"
    llm.reply(openai_reply(None, ("c2", "f__wait_for_file", {"path": str(there)})))
    with replica(config, environ) as (doomed, doomed_url, _):
        await run_until_killed(doomed_url, "Change it, then wait.", f"waiting for {there}", doomed)
    run_id = pg_cluster.psql(database_url, "select id from runs")
    index = RunIndex(PostgresDatabase(database_url), "reader")
    with anyio.fail_after(30):
        while (state := await index.read(run_id, owner=None)) is not None and state.status == "running":
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
    its next look (a third of its META_AGENT_LEASE_SECONDS: 3 s here, a look a second), not once the stopped
    replica's mark (30 s, the default) has lapsed."""
    changes, there = tmp_path / "changes.txt", tmp_path / "there"
    config = servers_json(tmp_path)
    environ = replica_environ(llm, database_url, tmp_path)
    looking = {**environ, "META_AGENT_LEASE_SECONDS": "3"}
    llm.reply(openai_reply(None, ("c1", "f__append", {"path": str(changes), "text": "changed"})))
    llm.reply(openai_reply(None, ("c2", "f__wait_for_file", {"path": str(there)})))
    llm.reply(openai_reply("All done."))
    with replica(config, environ) as (stopped, stopped_url, _), http_serving(config, looking) as (other, log):
        task, waiting = "Change it, then wait.", f"waiting for {there}"
        assert await run_until_killed(stopped_url, task, waiting, stopped, signal=15) == 143
        there.touch()
        run_id = pg_cluster.psql(database_url, "select id from runs")
        run = await done_run(f"{other}/mcp", run_id, within=20)  # 30 s would be the mark lapsing
        assert run["error"] is None and run["result"]["answer"] == "All done.", run
        assert changes.read_text() == "changed\n"
        assert log.count("run_resumed") == 1


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
    recorded = "select count(*) from dbos.operation_outputs where function_name = 'tool f.append'"

    async def change_recorded() -> None:
        with anyio.fail_after(30):
            while pg_cluster.psql(database_url, recorded) != "1":
                await anyio.sleep(0.05)  # until the change's step is recorded

    with replica(config, environ) as (doomed, doomed_url, _), http_serving(config, environ) as (other, log):
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


async def test_a_durable_run_its_caller_cancels_is_cancelled_for_good_and_one_engine_per_process_has_them(
    database_url: str, pg_cluster: Cluster, llm: FakeLLM, tmp_path: Path
) -> None:
    """In this process: a run cancelled by its caller is cancelled in DBOS too (left pending, a replica of the same
    name would resume it), and a second engine with durable runs is refused in one line."""
    settings = Settings(model="openai:fake-model", database_url=database_url, trace_dir=tmp_path)
    servers = {"f": ServerEntry(command=sys.executable, args=[str(FAULT_SERVER)])}
    llm.reply(openai_reply(None, ("c1", "f__hang", {})))
    async with Engine(settings, servers, openai_env(llm)) as engine:
        with pytest.raises(
            ConfigError, match=r"^META_AGENT_DATABASE_URL: one engine per process can have durable runs$"
        ):
            async with Engine(settings, {}, openai_env(llm)):
                pass
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: engine.run("Wait forever.", mode="agent"))
            with anyio.fail_after(30):
                while len(llm.requests) < 1 or engine.pool["f"].status.state != "ready":
                    await anyio.sleep(0.05)  # polling for the run to be in its tool call, not waiting a fixed time
                while pg_cluster.psql(database_url, "select count(*) from dbos.operation_outputs") == "0":
                    await anyio.sleep(0.05)
            tg.cancel_scope.cancel()
    run_id = pg_cluster.psql(database_url, "select id from runs")
    status = f"select status from dbos.workflow_status where workflow_uuid = '{run_id}'"
    assert pg_cluster.psql(database_url, status) == "CANCELLED"
    assert pg_cluster.psql(database_url, f"select status, error from runs where id = '{run_id}'") == "done|cancelled"


async def test_a_resumed_run_does_not_overwrite_a_turn_of_its_conversation_saved_while_it_was_interrupted(
    database_url: str, pg_cluster: Cluster, llm: FakeLLM, tmp_path: Path
) -> None:
    """Its replica killed, the conversation goes on without it (its hold lapsed) on a replica started again, before
    any replica resumes the run; then one started after that turn resumes it: the resumed run's answer is returned,
    but its turn is not saved over the later one."""
    there = tmp_path / "there"
    config = servers_json(tmp_path)
    environ = {**replica_environ(llm, database_url, tmp_path), "META_AGENT_LEASE_SECONDS": "1"}
    llm.reply(openai_reply("Noted."))
    llm.reply(openai_reply(None, ("c1", "f__wait_for_file", {"path": str(there)})))
    with replica(config, environ) as (doomed, doomed_url, _):
        async with Client(doomed_url) as client:
            first = await client.call_tool("agent", {"task": "Remember 42."})
        conversation = first.structured_content["conversation_id"]  # type: ignore[index]
        progress = ProgressLog()

        async def call_and_lose_it() -> None:
            with contextlib.suppress(Exception):  # the connection dies with the replica
                async with Client(doomed_url) as client:
                    task = {"task": "Wait.", "conversation_id": conversation}
                    await client.call_tool("agent", task, progress_callback=progress)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call_and_lose_it)
            await progress.until(f"waiting for {there}", timeout=60)
            doomed.kill()
            await anyio.to_thread.run_sync(doomed.wait, 30)
            tg.cancel_scope.cancel()
    run_id = pg_cluster.psql(database_url, "select id from runs where task = 'Wait.'")
    # A replica looks for runs to resume every third of its lease: every 100 s with this one's 300 s, never within
    # the test. The replica that resumes the run (a look a third of a second) starts once the later turn is saved.
    later = {**environ, "META_AGENT_LEASE_SECONDS": "300"}
    with replica(config, later) as (_, url, log):
        llm.reply(openai_reply("It was 42."))
        async with Client(url) as client:
            said = await client.call_tool("agent", {"task": "What was it?", "conversation_id": conversation})
        assert said.structured_content is not None and said.structured_content["conversation_id"] == conversation
        assert log.count("run_resumed") == 0, "resumed before the turn that should come first"
        there.touch()
        llm.reply(openai_reply("Waited."))
        with replica(config, environ) as (_, _, resuming_log):
            run = await done_run(url, run_id)
        assert log.count("run_resumed") + resuming_log.count("run_resumed") == 1
    assert run["result"]["answer"] == "Waited." and run["result"]["conversation_id"] is None, run
    assert run["result"]["conversation_error"] == (
        "the conversation moved on while this run was interrupted (a later turn was saved first); this turn was not "
        "saved"
    )
    saved = json.loads(pg_cluster.psql(database_url, f"select messages from conversations where id = '{conversation}'"))
    said_by_user = [part["text"] for m in saved if m["role"] == "user" for part in m["parts"]]
    assert said_by_user == ["Remember 42.", "What was it?"]


@dataclass(frozen=True)
class Waiting:
    """A run that made its change, then waited for a file that is not there: its replica was SIGKILLed in the wait."""

    config: Path
    environ: dict[str, str]
    changes: Path
    there: Path
    run_id: str


async def killed_while_waiting(database_url: str, pg_cluster: Cluster, llm: FakeLLM, tmp_path: Path) -> Waiting:
    changes, there = tmp_path / "changes.txt", tmp_path / "there"
    config = servers_json(tmp_path)
    environ = {**replica_environ(llm, database_url, tmp_path), "META_AGENT_LEASE_SECONDS": "1"}
    llm.reply(openai_reply(None, ("c1", "f__append", {"path": str(changes), "text": "changed"})))
    llm.reply(openai_reply(None, ("c2", "f__wait_for_file", {"path": str(there)})))
    with replica(config, environ) as (doomed, doomed_url, _):
        await run_until_killed(doomed_url, "Change it, then wait.", f"waiting for {there}", doomed)
    return Waiting(config, environ, changes, there, pg_cluster.psql(database_url, "select id from runs"))


async def finish(run: Waiting, llm: FakeLLM, url: str) -> None:
    """The file is there: the run, finished through the replica at `url`, made its change once."""
    run.there.touch()
    llm.reply(openai_reply("All done."))
    done = await done_run(url, run.run_id)
    assert done["error"] is None and done["result"]["answer"] == "All done.", done
    assert run.changes.read_text() == "changed\n"


async def test_a_resumed_run_whose_engine_stops_is_left_for_another_replica_not_cancelled(
    database_url: str, pg_cluster: Cluster, llm: FakeLLM, tmp_path: Path
) -> None:
    """An engine stopped without a signal (its host closed stdin, say) ends the runs it resumed: nobody cancelled
    them, so they are left interrupted, at once, and the next replica finishes them."""
    waiting = await killed_while_waiting(database_url, pg_cluster, llm, tmp_path)
    row = f"select replica, status, error, alive_until from runs where id = '{waiting.run_id}'"
    settings = Settings(model="openai:fake-model", database_url=database_url, trace_dir=tmp_path, lease_seconds=1)
    async with Engine(settings, load_servers(waiting.config, os.environ), openai_env(llm)) as engine:
        with anyio.fail_after(30):  # until it runs the run again (its replica's mark lapsed)
            while not pg_cluster.psql(database_url, row).startswith(f"{engine.index.replica}|running|"):
                await anyio.sleep(0.05)
            # its row taken as lapsed meanwhile (its mark is short, a loaded machine slow): this replica runs it, so
            # it is not handed on (to be run twice, and left queued when this engine stops)
            assert engine.durable is not None
            await engine.durable._resume(waiting.run_id, engine.index.replica)
    assert pg_cluster.psql(database_url, row) == f"{engine.index.replica}|running||0"
    status = f"select status from dbos.workflow_status where workflow_uuid = '{waiting.run_id}'"
    assert pg_cluster.psql(database_url, status) == "PENDING"
    with replica(waiting.config, waiting.environ) as (_, url, _):
        await finish(waiting, llm, url)


async def test_a_run_whose_next_replica_stops_before_running_it_is_handed_on_again(
    database_url: str, pg_cluster: Cluster, llm: FakeLLM, tmp_path: Path
) -> None:
    """A replica that took a run from DBOS's queue and stopped before the run's first write here (DBOS names it, the
    run index still the replica before it): the run is handed on again, not left to nobody."""
    waiting = await killed_while_waiting(database_url, pg_cluster, llm, tmp_path)
    # what such a replica leaves: the workflow pending under its name
    workflow = f"workflow_uuid = '{waiting.run_id}'"
    pg_cluster.psql(database_url, f"update dbos.workflow_status set executor_id = 'gone' where {workflow}")
    with replica(waiting.config, waiting.environ) as (_, url, log):
        await finish(waiting, llm, url)
    assert log.count("run_resumed") == 1


async def test_a_run_of_another_format_with_no_replica_of_it_left_is_ended_as_failed_not_left_interrupted(
    database_url: str, pg_cluster: Cluster, llm: FakeLLM, tmp_path: Path
) -> None:
    """An upgrade whose durable-run format changed, after the last replica of the older format died: the run is
    handed on for DBOS to give to a replica of its format, a lease later it is still queued, and it is ended as
    failed, in one line, and cancelled in DBOS; nothing of it runs again. (tests/durable/test_durable_upgrades.py
    runs two installed releases.)"""
    waiting = await killed_while_waiting(database_url, pg_cluster, llm, tmp_path)
    workflow = f"workflow_uuid = '{waiting.run_id}'"
    version = f"select application_version from dbos.workflow_status where {workflow}"
    assert pg_cluster.psql(database_url, version) == APPLICATION_VERSION
    pg_cluster.psql(
        database_url, f"update dbos.workflow_status set application_version = 'run-format-0' where {workflow}"
    )
    with replica(waiting.config, waiting.environ) as (_, url, log):
        run = await done_run(url, waiting.run_id)
        assert log.count("run_left_to_its_format") == 1 and log.count("run_not_resumable") == 1
        assert log.count("run_resumed") == 0
    assert run["error"] == NOT_RESUMABLE and run["result"] is None, run
    assert pg_cluster.psql(database_url, f"select status from dbos.workflow_status where {workflow}") == "CANCELLED"
    assert waiting.changes.read_text() == "changed\n"
    assert len(llm.requests) == 2  # the turns before the kill, and none since
