"""MCP tasks across processes (README, Tasks): real `meta-agent serve --transport http` replicas on one PostgreSQL
database, spoken to in raw JSON-RPC over HTTP in both protocol eras (2025-11-25: `initialize` and a session per
replica; 2026-07-28: stateless requests declaring the tasks extension). A task made on one replica is read, answered
and cancelled through the other, finished by the other when its replica is SIGKILLed, and nobody but its maker can
touch it; on the embedded SQLite file a task whose process ended reads `failed`, saying why."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import openai_env
from fake_llm import FakeLLM, openai_reply
from postgres_cluster import Cluster
from replicas import fault_config, replica, replica_environ
from task_hosts import (
    BOUND,
    LEGACY,
    MODERN,
    RELATED,
    TERMINAL,
    Caller,
    Era,
    answer_of,
    caller,
    empty,
    updated,
    wait_for,
)

pytestmark = pytest.mark.anyio

HELD = 300.0  # a model reply held this long: until its caller goes away (a killed replica), in practice
LOST = "the process that ran it ended before the run finished"


@pytest.mark.parametrize("made_in", [LEGACY, MODERN])
async def test_a_task_whose_replica_is_killed_is_finished_elsewhere_and_read_completed_on_each(
    made_in: Era, database_url: str, llm: FakeLLM, tmp_path: Path
) -> None:
    """The task's run waits on its model turn when its replica is SIGKILLed. Read through the other replica it is
    `working` throughout (running on the killed one, with the progress line it has there, then waiting to be taken
    over, then running again), never failed; a third replica, started once the task was seen waiting to be taken
    over, hands the run on (durable), one of the two takes it from DBOS's queue and resumes it, and the task reads
    `completed` with the run's answer in both eras on either replica, where 2025-11-25's tasks/result gives the
    CallToolResult with the related-task `_meta`."""
    config = fault_config(tmp_path)
    environ = replica_environ(llm, database_url, tmp_path)
    # The doomed replica's mark on its run lapses 1 s after it dies. The replica the test reads through looks for
    # lapsed runs only every 100 s (a third of its lease), never within the test: the wait to be taken over lasts
    # until the test starts the replica that takes it over, which looks every third of a second.
    quick, reader_env = {**environ, "META_AGENT_LEASE_SECONDS": "1"}, {**environ, "META_AGENT_LEASE_SECONDS": "300"}
    llm.reply(openai_reply("never seen"), delay=HELD)  # the doomed replica's model turn: held until it dies
    llm.reply(openai_reply("All done."))  # the same turn, made again by the replica that resumes the run
    with replica(config, quick) as (doomed, doomed_url, _), replica(config, reader_env) as (_, other_url, log):
        async with caller(doomed_url, made_in) as maker:
            task_id = await maker.start("agent", "Say it is all done.")
            await wait_for(lambda: len(llm.requests) == 1)  # its model turn is held
            async with caller(other_url, LEGACY) as old, caller(other_url, MODERN) as new:
                line = (await maker.task(task_id))["statusMessage"]
                assert line == "step 1 · model"
                for host in (old, new):  # its progress, as its replica says it, is its status message there too
                    seen = await host.until(task_id, lambda read: read.get("statusMessage") == line)
                    assert set(seen.statuses) == {"working"}, seen
                doomed.kill()
                await anyio.to_thread.run_sync(doomed.wait, 30)
                waiting = "stopped; another replica takes it over"
                seen = await new.until(task_id, lambda read: waiting in read.get("statusMessage", ""))
                assert set(seen.statuses) == {"working"}, seen  # read through the other while it waits: never failed
                with replica(config, quick) as (_, taker_url, taker_log):
                    seen = await new.until(task_id, lambda read: read["status"] in TERMINAL)
                    assert seen.statuses[-1] == "completed" and set(seen.statuses[:-1]) <= {"working"}, seen
                    assert answer_of(seen[-1]["result"]) == "All done."
                    assert seen[-1]["resultType"] == "complete"
                    async with caller(taker_url, LEGACY) as taker_old, caller(taker_url, MODERN) as taker_new:
                        for each_old, each_new in ((old, new), (taker_old, taker_new)):
                            done = await each_new.task(task_id)
                            assert done["status"] == "completed" and answer_of(done["result"]) == "All done.", done
                            legacy = await each_old.task(task_id)
                            assert legacy["status"] == "completed" and legacy["taskId"] == task_id, legacy
                            assert "result" not in legacy  # 2025-11-25 gives it by tasks/result
                            result = await each_old.result("tasks/result", {"taskId": task_id})
                            assert answer_of(result) == "All done."
                            assert result["_meta"][RELATED] == {"taskId": task_id}, result
    assert taker_log.count("run_handed_on") == 1 and log.count("run_handed_on") == 0  # the reader never looked
    assert taker_log.count("run_resumed") + log.count("run_resumed") == 1
    assert len(llm.requests) == 2  # the turn held by the killed replica, and the same turn again


async def test_only_the_caller_that_made_a_task_can_read_answer_or_cancel_it_on_either_replica(
    database_url: str, llm: FakeLLM, tmp_path: Path
) -> None:
    """No META_AGENT_HTTP_TOKEN: every Authorization header reaches /mcp, and a task is its header's. Another header
    (or none) is told "unknown task" for every tasks/* method of both eras, on the replica running it and on the
    other, and lists nothing; the task goes on, untouched, and its maker reads its result through the other."""
    there = tmp_path / "there"
    config = fault_config(tmp_path)
    environ = replica_environ(llm, database_url, tmp_path)
    llm.reply(openai_reply(None, ("c1", "f__wait_for_file", {"path": str(there)})))
    llm.reply(openai_reply("Mine."))
    with replica(config, environ) as (_, one, _), replica(config, environ) as (_, other, _):
        async with caller(one, LEGACY, "Bearer a") as maker:
            task_id = await maker.start("agent", "Wait for the file.")
            await maker.until(task_id, lambda read: str(there) in read.get("statusMessage", ""))
            for url in (one, other):
                for authorization in ("Bearer b", None):
                    await refused(url, authorization, task_id)
        assert not there.exists()
        there.touch()
        async with caller(other, LEGACY, "Bearer a") as maker, caller(other, MODERN, "Bearer a") as modern:
            seen = await modern.until(task_id, lambda read: read["status"] in TERMINAL)
            assert seen.statuses[-1] == "completed", seen
            assert answer_of(seen[-1]["result"]) == "Mine."
            assert answer_of(await maker.result("tasks/result", {"taskId": task_id})) == "Mine."
            assert [task["taskId"] for task in (await maker.result("tasks/list"))["tasks"]] == [task_id]


async def refused(url: str, authorization: str | None, task_id: str) -> None:
    """Every tasks/* method of both eras, by a caller with `authorization`, gets what an unknown task gets."""
    unknown = f"unknown task {task_id!r}"
    async with caller(url, LEGACY, authorization) as old, caller(url, MODERN, authorization) as new:
        for host, method, extra in (
            (old, "tasks/get", {}),
            (old, "tasks/result", {}),
            (old, "tasks/cancel", {}),
            (new, "tasks/get", {}),
            (new, "tasks/update", {"inputResponses": {"approval-1": {"action": "accept", "content": {}}}}),
            (new, "tasks/cancel", {}),
        ):
            error = await host.error(method, {"taskId": task_id, **extra})
            assert (error["code"], error["message"]) == (-32602, unknown), (url, authorization, host.era, method, error)
        assert (await old.result("tasks/list"))["tasks"] == []
        # and a task id nobody made gets the same
        forged = await new.error("tasks/get", {"taskId": "01" + task_id[2:][::-1]})
        assert forged["code"] == -32602 and forged["message"].startswith("unknown task "), forged


async def test_a_tasks_approval_is_answered_through_the_other_replica(
    database_url: str, llm: FakeLLM, tmp_path: Path
) -> None:
    """The run on one replica asks for an approval: the other shows it in `inputRequests`; a `tasks/update` there
    resumes the run where it runs (answers to keys not asked, or asked already, change nothing)."""
    config = fault_config(tmp_path)
    environ = replica_environ(llm, database_url, tmp_path)
    llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": "/a"})))
    llm.reply(openai_reply("Deleted."))
    allow = {"action": "accept", "content": {"decision": "allow_once"}}
    with replica(config, environ) as (_, one, _), replica(config, environ) as (_, other, _):
        async with caller(one, MODERN) as here, caller(other, MODERN) as there:
            task_id = await here.start("agent", "Delete /a.")
            seen = await there.until(task_id, lambda read: read["status"] != "working")
            asking = seen[-1]
            assert asking["status"] == "input_required", seen
            [(key, request)] = asking["inputRequests"].items()
            assert request["method"] == "elicitation/create" and "/a" in request["params"]["message"], request
            assert (await here.task(task_id))["inputRequests"] == asking["inputRequests"]  # the same question there
            # an answer to a question never asked changes nothing: the task still asks
            await updated(there, task_id, {"approval-9": allow})
            assert (await there.task(task_id))["inputRequests"] == asking["inputRequests"]
            await updated(there, task_id, {key: allow})
            seen = await there.until(task_id, lambda read: read["status"] in TERMINAL)
            assert seen.statuses[-1] == "completed", seen
            assert answer_of(seen[-1]["result"]) == "Deleted."
            assert (await here.task(task_id))["status"] == "completed"
            # replayed, once the task has ended: accepted and ignored
            await updated(there, task_id, {key: allow})
    results = [m["content"] for m in llm.requests[-1].body["messages"] if m["role"] == "tool"]
    assert results == ["deleted /a"]
    assert len(llm.requests) == 2


async def test_a_task_cancelled_through_the_other_replica_cancels_its_run_and_its_childs_call(
    database_url: str, pg_cluster: Cluster, llm: FakeLLM, tmp_path: Path
) -> None:
    """`tasks/cancel` on the replica not running the task: the run on the other is cancelled, with its child's call,
    and the task reads `cancelled` on both, in both eras."""
    cancelled = tmp_path / "cancelled"
    config = fault_config(tmp_path)
    environ = replica_environ(llm, database_url, tmp_path)
    llm.reply(openai_reply(None, ("c1", "f__hang", {"cancel_file": str(cancelled)})))
    with replica(config, environ) as (_, one, _), replica(config, environ) as (_, other, _):
        async with caller(one, MODERN) as here, caller(other, MODERN) as there, caller(other, LEGACY) as old:
            task_id = await here.start("agent", "Hang.")
            await here.until(task_id, lambda read: "hanging" in read.get("statusMessage", ""))
            assert empty(await there.result("tasks/cancel", {"taskId": task_id}))
            await wait_for(cancelled.exists)  # the child's call, on the replica running the task, was cancelled
            for host in (here, there, old):
                assert (await host.task(task_id))["status"] == "cancelled"
            error = await old.error("tasks/result", {"taskId": task_id})
            assert error["code"] == -32602 and "has no result" in error["message"], error
            row = f"select status, error from runs where id = '{task_id}'"
            with anyio.fail_after(BOUND):
                while pg_cluster.psql(database_url, row) != "done|cancelled":
                    await anyio.sleep(0.05)  # the run ends as cancelled on its replica
    assert len(llm.requests) == 1


async def test_an_embedded_task_whose_process_ended_reads_failed_from_the_next_process(
    llm: FakeLLM, tmp_path: Path
) -> None:
    """No PostgreSQL: nobody resumes a run whose process died. The next process on the same SQLite file reads the
    task (same Authorization header) `failed` once the dead process's mark lapses, with a status message saying why;
    its tasks/result is an error saying the same; another caller is told the task is unknown."""
    config = fault_config(tmp_path)
    base = {key: value for key, value in os.environ.items() if key != "META_AGENT_DATABASE_URL"}
    state = {"META_AGENT_CONVERSATIONS_DB": str(tmp_path / "state.sqlite3"), "META_AGENT_TRACE_DIR": str(tmp_path)}
    environ = openai_env(llm, model="openai:fake-model", base=base | state, META_AGENT_LEASE_SECONDS="1")
    llm.reply(openai_reply("never seen"), delay=HELD)
    with replica(config, environ) as (first, url, _):
        async with caller(url, LEGACY, "Bearer me") as maker:
            task_id = await maker.start("agent", "Say something.")
            await wait_for(lambda: len(llm.requests) == 1)
        first.kill()
        await anyio.to_thread.run_sync(first.wait, 30)
    with replica(config, environ) as (_, url, _):
        async with caller(url, LEGACY, "Bearer me") as old, caller(url, MODERN, "Bearer me") as new:
            seen = await old.until(task_id, lambda read: read["status"] != "working")
            assert seen[-1]["status"] == "failed" and seen[-1]["statusMessage"] == LOST, seen
            modern = await new.task(task_id)
            assert modern["status"] == "failed" and modern["statusMessage"] == LOST, modern
            assert modern["error"]["message"] == LOST and "result" not in modern, modern
            error = await old.error("tasks/result", {"taskId": task_id})
            assert error["code"] == -32603 and LOST in error["message"], error
            assert [task["status"] for task in (await old.result("tasks/list"))["tasks"]] == ["failed"]
        async with caller(url, MODERN, "Bearer someone else") as stranger:
            assert (await stranger.error("tasks/get", {"taskId": task_id}))["code"] == -32602
    assert len(llm.requests) == 1  # nothing ran it again


async def test_a_task_taken_over_by_the_other_replica_is_cancelled_there(
    database_url: str, pg_cluster: Cluster, llm: FakeLLM, tmp_path: Path
) -> None:
    """The task's replica is SIGKILLed in a tool call; the other resumes its run. A `tasks/cancel` then (through the
    replica now running it) cancels that run too: the task reads `cancelled`, and its run ends as cancelled, not
    left to go on making calls nobody wants."""
    there = tmp_path / "there"
    config = fault_config(tmp_path)
    environ = {**replica_environ(llm, database_url, tmp_path), "META_AGENT_LEASE_SECONDS": "1"}
    llm.reply(openai_reply(None, ("c1", "f__wait_for_file", {"path": str(there)})))
    llm.reply(openai_reply("Should not be asked."))
    with replica(config, environ) as (doomed, doomed_url, _), replica(config, environ) as (_, other_url, log):
        async with caller(doomed_url, MODERN) as maker:
            task_id = await maker.start("agent", "Wait for the file.")
            await maker.until(task_id, lambda read: str(there) in read.get("statusMessage", ""))
        doomed.kill()
        await anyio.to_thread.run_sync(doomed.wait, 30)
        await anyio.to_thread.run_sync(lambda: log.wait_for("run_resumed", timeout=BOUND))
        async with caller(other_url, MODERN) as new:
            assert (await new.task(task_id))["status"] == "working"
            assert empty(await new.result("tasks/cancel", {"taskId": task_id}))
            assert (await new.task(task_id))["status"] == "cancelled"
            row = f"select status, error from runs where id = '{task_id}'"
            with anyio.fail_after(20):
                while (status := pg_cluster.psql(database_url, row)) != "done|cancelled":
                    await anyio.sleep(0.1)  # the resumed run ends as cancelled on the replica running it
            assert status == "done|cancelled"
        there.touch()  # were the run still going, it would now ask the model again
    assert len(llm.requests) == 1


async def test_a_legacy_tasks_approval_is_asked_on_the_stream_of_its_result_on_the_other_replica(
    database_url: str, llm: FakeLLM, tmp_path: Path
) -> None:
    """2025-11-25: the run on one replica asks for an approval; through the other, the task reads `input_required`
    (the question as its status message), and `tasks/result` there puts the question to the caller on its own
    stream (an `elicitation/create` with the related-task `_meta`); the answer, sent back to that replica, resumes
    the run where it runs, and the same `tasks/result` then answers with the run's result."""
    config = fault_config(tmp_path)
    environ = replica_environ(llm, database_url, tmp_path)
    llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": "/a"})))
    llm.reply(openai_reply("Deleted."))
    with replica(config, environ) as (_, one, _), replica(config, environ) as (_, other, _):
        async with caller(one, LEGACY) as maker, caller(other, LEGACY) as old:
            task_id = await maker.start("agent", "Delete /a.")
            seen = await old.until(task_id, lambda read: read["status"] != "working")
            assert seen[-1]["status"] == "input_required" and "/a" in seen[-1]["statusMessage"], seen
            asked, result = await result_answering(
                old, task_id, {"action": "accept", "content": {"decision": "allow_once"}}
            )
            [question] = asked
            assert "/a" in question["params"]["message"] and question["params"]["_meta"][RELATED] == {"taskId": task_id}
            assert answer_of(result) == "Deleted." and result["_meta"][RELATED] == {"taskId": task_id}, result
            assert (await maker.task(task_id))["status"] == "completed"
    results = [m["content"] for m in llm.requests[-1].body["messages"] if m["role"] == "tool"]
    assert results == ["deleted /a"]


async def result_answering(
    host: Caller, task_id: str, answer: dict[str, Any]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """2025-11-25 `tasks/result`, read as a stream: each question the server asks on it answered with `answer` (a
    JSON-RPC response POSTed in the caller's session); the questions, and the result."""
    host.ids += 1
    body = {"jsonrpc": "2.0", "id": host.ids, "method": "tasks/result", "params": {"taskId": task_id}}
    headers = host.in_session()
    asked: list[dict[str, Any]] = []
    with anyio.fail_after(BOUND):
        async with host.http.stream("POST", host.url, json=body, headers=headers) as response:
            assert response.headers["content-type"].startswith("text/event-stream"), response.headers
            async for line in response.aiter_lines():
                if not line.startswith("data:") or not (data := line.removeprefix("data:").strip()):
                    continue
                message = json.loads(data)
                if message.get("method") == "elicitation/create":
                    asked.append(message)
                    reply = {"jsonrpc": "2.0", "id": message["id"], "result": answer}
                    sent = await host.http.post(host.url, json=reply, headers=headers)
                    assert sent.status_code == 202, sent.text
                elif message.get("id") == host.ids:
                    assert "result" in message, message
                    return asked, message["result"]
    raise AssertionError("tasks/result ended without an answer")
