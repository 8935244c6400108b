"""A task whose replica dies keeps its caller (front/tasks/resumed.py; README, Replicas on PostgreSQL): real `meta-agent
serve --transport http` replicas on one PostgreSQL database, the task's replica SIGKILLed while the task waits for
the approval of a call that changes things (the fault child's f.append, which appends a line to a file: the file
counts the calls). The other replica resumes the run as the task's: the task asks again there, in each era's way
(2026-07-28: `inputRequests` of `tasks/get`, answered by `tasks/update`; 2025-11-25: on the stream of `tasks/result`,
through a raw client and the TypeScript SDK's tasks client), the answer runs the call once, and the task completes.
A cancel instead, landing at each moment of the takeover, ends the run, and the call never runs."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from fake_llm import FakeLLM, openai_reply
from mcp import Client
from postgres_cluster import Cluster
from replicas import done_run, fault_config, replica, replica_environ
from task_hosts import BOUND, LEGACY, MODERN, TERMINAL, Era, answer_of, caller, empty, updated
from test_tasks_clients import TS_CLIENT, TS_SDK, hosting
from test_tasks_replicas import refused, result_answering

from meta_agent.durable.steps import NOBODY_TO_ASK

pytestmark = pytest.mark.anyio

ALLOW = {"action": "accept", "content": {"decision": "allow_once"}}
# Both replicas' marks lapse a second after they stop being renewed; each looks for lapsed runs every third of that.
QUICK = {"META_AGENT_LEASE_SECONDS": "1"}
# A replica that looks for lapsed runs only every 100 s (a third of its lease): never within a test.
NEVER_LOOKS = {"META_AGENT_LEASE_SECONDS": "300"}


def appending(llm: FakeLLM, path: Path) -> None:
    """The model calls f.append on `path` (asked: trust `ask`), then answers once told the result."""
    llm.reply(openai_reply(None, ("c1", "f__append", {"path": str(path), "text": "once"})))
    llm.reply(openai_reply("Appended."))


def asking_key(read: dict[str, Any]) -> str | None:
    """The key of the question a task asks (either era), or None."""
    if read["status"] != "input_required":
        return None
    if "inputRequests" in read:
        [key] = read["inputRequests"]
        return str(key)
    return "asked"  # 2025-11-25 shows no key: the question is put on the stream of tasks/result


async def killed_while_asking(era: Era, doomed: Any, doomed_url: str, other_url: str, path: Path) -> tuple[str, str]:
    """A task made on the doomed replica, asking to append to `path`, seen asking through the other; then the doomed
    replica SIGKILLed: the task's id and the key of the question it asked there."""
    async with caller(doomed_url, era) as maker, caller(other_url, MODERN) as watcher:
        task_id = await maker.start("agent", "Append once.")
        seen = await watcher.until(task_id, lambda read: read["status"] != "working")
        assert seen[-1]["status"] == "input_required", seen
        [first] = seen[-1]["inputRequests"]
        assert str(path) in seen[-1]["inputRequests"][first]["params"]["message"]
    doomed.kill()
    await anyio.to_thread.run_sync(doomed.wait, 30)
    return task_id, first


async def run_row(pg_cluster: Cluster, database_url: str, task_id: str, wanted: str) -> None:
    """Wait for the run's row in the run index to read `wanted` (`status|error`)."""
    await reads(pg_cluster, database_url, f"select status, error from runs where id = '{task_id}'", wanted)


async def reads(pg_cluster: Cluster, database_url: str, query: str, wanted: str) -> None:
    """Wait for `query` to read `wanted`."""
    with anyio.fail_after(BOUND):
        while pg_cluster.psql(database_url, query) != wanted:
            await anyio.sleep(0.1)  # the run ends on the replica running it


@pytest.mark.parametrize("era", [MODERN, LEGACY])
async def test_a_question_pending_when_its_replica_dies_is_asked_again_on_the_other_and_the_call_runs_once(
    era: Era, database_url: str, llm: FakeLLM, tmp_path: Path
) -> None:
    """Through the other replica the task reads `working` once the dead replica's question lapsed (no question of a
    dead replica is offered), then asks again, under a new key: an answer to the old key changes nothing. The
    answer (tasks/update; or on the stream of tasks/result, 2025-11-25) runs the call once, the task completes with the
    run's answer on both eras' reads, and its status message is the resumed run's progress."""
    path = tmp_path / "appended"
    appending(llm, path)
    environ = {**replica_environ(llm, database_url, tmp_path), **QUICK}
    config = fault_config(tmp_path, {"append": "ask"})
    with replica(config, environ) as (doomed, doomed_url, _), replica(config, environ) as (_, other_url, log):
        task_id, first = await killed_while_asking(era, doomed, doomed_url, other_url, path)
        async with caller(other_url, MODERN) as new, caller(other_url, LEGACY) as old:
            seen = await new.until(task_id, lambda read: asking_key(read) not in (None, first))
            [second] = seen[-1]["inputRequests"]
            assert int(second.rpartition("-")[2]) > int(first.rpartition("-")[2]), (first, second)
            assert "working" in seen.statuses, seen  # between the two: the dead replica's question was not offered
            await updated(new, task_id, {first: ALLOW})  # the dead replica's question: not pending any more
            assert asking_key(await new.task(task_id)) == second
            await refused(other_url, "Bearer someone else", task_id)  # nobody else may read or answer it
            assert asking_key(await new.task(task_id)) == second
            assert not path.exists()
            if era == MODERN:
                async with caller(other_url, MODERN) as also, anyio.create_task_group() as twice:
                    for host in (new, also):  # answered twice at once: taken once
                        twice.start_soon(updated, host, task_id, {second: ALLOW})
                seen = await new.until(task_id, lambda read: read["status"] in TERMINAL)
                assert seen.statuses[-1] == "completed", seen
                assert answer_of(seen[-1]["result"]) == "Appended."
            else:
                asking = await old.task(task_id)
                assert asking["status"] == "input_required" and str(path) in asking["statusMessage"], asking
                asked, result = await result_answering(old, task_id, ALLOW)
                assert len(asked) == 1 and str(path) in asked[0]["params"]["message"], asked
                assert answer_of(result) == "Appended."
            assert (await old.task(task_id))["status"] == "completed"
            await updated(new, task_id, {second: ALLOW})  # answered again once it ended: accepted, ignored
    assert path.read_text() == "once\n"  # the call ran once, on the other replica
    assert log.count("task_resumed") == 1
    assert len(llm.requests) == 2  # the first turn (replayed from its record on resuming, not asked again), the last


async def test_the_typescript_sdks_tasks_client_follows_its_task_to_the_other_replica(
    database_url: str, llm: FakeLLM, tmp_path: Path
) -> None:
    """A 2025-11-25 host made the task on the replica that died; the TypeScript SDK's tasks client, pointed at the
    other, reads it (tasks/get) until it asks again, then tasks/result: the question comes as elicitation/create
    with the task's related-task `_meta`, the SDK's handler accepts, the call runs once, and the result is the run's."""
    assert TS_SDK.exists(), "the TypeScript SDK is not installed; run the README's test command"
    path = tmp_path / "appended"
    appending(llm, path)
    environ = {**replica_environ(llm, database_url, tmp_path), **QUICK}
    config = fault_config(tmp_path, {"append": "ask"})
    with replica(config, environ) as (doomed, doomed_url, _), replica(config, environ) as (_, other_url, _):
        task_id, first = await killed_while_asking(LEGACY, doomed, doomed_url, other_url, path)
        async with caller(other_url, MODERN) as new:  # asked again there (not the dead replica's question)
            await new.until(task_id, lambda read: asking_key(read) not in (None, first))
        command = ["node", str(TS_CLIENT), "--url", other_url, "--tool", "agent", "--scenario", "follow"]
        command += ["--task", task_id, "--content", json.dumps(ALLOW["content"])]
        async with hosting(command, os.environ, tmp_path / "client.err") as host:
            code = await host.ended()
    assert code == 0, host.transcript()
    assert host.named("taskStatus")[-1]["task"]["status"] == "input_required", host.transcript()
    question = host.one("elicitation")["params"]
    assert str(path) in question["message"] and question["_meta"]["io.modelcontextprotocol/related-task"] == {
        "taskId": task_id
    }
    result = host.one("result")["result"]
    assert not result.get("isError") and result["structuredContent"]["answer"] == "Appended.", result
    assert path.read_text() == "once\n"


@pytest.mark.parametrize("moment", ["before the takeover", "while it asks again", "with its cancel note lost"])
async def test_a_task_cancelled_at_any_moment_of_its_takeover_ends_and_its_call_never_runs(
    moment: str, database_url: str, pg_cluster: Cluster, llm: FakeLLM, tmp_path: Path
) -> None:
    """The task's replica died while the task asked; it is cancelled before any replica takes the run over
    (`tasks/cancel` through the other, which never looks for lapsed runs; the replica that takes the run over starts
    only once the cancel was answered), or once the run asks again on the other (`tasks/cancel`), or with the cancel's
    note to the replicas lost (what `tasks/cancel` writes, the task's row and DBOS's record, written by hand, no
    note), and then the question answered `allow`. Each time the task reads `cancelled`, its run ends `cancelled` in
    the run index and in its durable record (never resumed again), and the call it asked about never runs."""
    path = tmp_path / "appended"
    appending(llm, path)
    environ = replica_environ(llm, database_url, tmp_path)
    config = fault_config(tmp_path, {"append": "ask"})
    before = moment == "before the takeover"
    other_env = {**environ, **(NEVER_LOOKS if before else QUICK)}
    with (
        replica(config, {**environ, **QUICK}) as (doomed, doomed_url, _),
        replica(config, other_env) as (_, other_url, log),
        contextlib.ExitStack() as later,
    ):
        logs = [log]
        task_id, first = await killed_while_asking(MODERN, doomed, doomed_url, other_url, path)
        async with caller(other_url, MODERN) as new:
            if before:
                assert empty(await new.result("tasks/cancel", {"taskId": task_id}))
                # only now does a replica that looks for lapsed runs start: the cancel came before any takeover
                logs.append(later.enter_context(replica(config, {**environ, **QUICK}))[2])
            else:
                seen = await new.until(task_id, lambda read: asking_key(read) not in (None, first))
                [second] = seen[-1]["inputRequests"]
                if moment == "while it asks again":
                    assert empty(await new.result("tasks/cancel", {"taskId": task_id}))
                else:
                    pg_cluster.psql(database_url, f"update tasks set cancelled = 1 where id = '{task_id}'")
                    await anyio.to_thread.run_sync(dbos_cancel, database_url, task_id)
                    await updated(new, task_id, {second: ALLOW})
            await run_row(pg_cluster, database_url, task_id, "done|cancelled")
            assert (await new.task(task_id))["status"] == "cancelled"
            # never resumed again: marked so in its durable record, just after its row (by the replica running it)
            status = f"select status from dbos.workflow_status where workflow_uuid = '{task_id}'"
            await reads(pg_cluster, database_url, status, "CANCELLED")
    assert not path.exists()
    assert sum(each.count("run_resumed") for each in logs) <= 1


def dbos_cancel(database_url: str, run_id: str) -> None:
    """Cancel the run in its durable record, as `tasks/cancel` does through a replica not running it."""
    from dbos import DBOSClient

    client = DBOSClient(system_database_url=database_url)
    try:
        client.cancel_workflow(run_id)
    finally:
        client.destroy()


async def test_a_plain_calls_run_resumed_elsewhere_refuses_the_call_it_was_asking_about_and_says_so(
    database_url: str, pg_cluster: Cluster, llm: FakeLLM, tmp_path: Path
) -> None:
    """A run of a plain call (no task) whose replica dies while its caller is asked: nobody can ask that caller
    again, so the replica that resumes it refuses the call (it never runs), the model is told why, and the run's
    result says so in the refused call's step."""
    path = tmp_path / "appended"
    llm.reply(openai_reply(None, ("c1", "f__append", {"path": str(path), "text": "once"})))
    llm.reply(openai_reply("It was refused."))
    environ = {**replica_environ(llm, database_url, tmp_path), **QUICK}
    config = fault_config(tmp_path, {"append": "ask"})
    asked = anyio.Event()

    async def never_answers(*_: Any) -> Any:
        asked.set()
        await anyio.sleep_forever()

    with replica(config, environ) as (doomed, doomed_url, _), replica(config, environ) as (_, other_url, log):
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                with contextlib.suppress(Exception):  # the connection dies with its replica
                    async with Client(doomed_url, elicitation_callback=never_answers) as client:
                        await client.call_tool("agent", {"task": "Append once."})

            tg.start_soon(call)
            with anyio.fail_after(BOUND):
                await asked.wait()
            doomed.kill()
            await anyio.to_thread.run_sync(doomed.wait, 30)
            tg.cancel_scope.cancel()
        run_id = pg_cluster.psql(database_url, "select id from runs")
        run = await done_run(other_url, run_id)
    assert run["result"]["answer"] == "It was refused.", run
    [call] = [call for step in run["result"]["steps"] for call in step["tool_calls"]]
    assert call["name"] == "f.append" and not call["ok"] and NOBODY_TO_ASK in call["error"], call
    assert not path.exists()
    assert log.count("task_resumed") == 0 and log.count("run_resumed") == 1
    assert NOBODY_TO_ASK in llm.requests[-1].body["messages"][-1]["content"]
