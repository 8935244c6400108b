"""Deploys (durable/runs.py, durable/format.py; docs/replicas.md, Deploys): two installed releases of meta-agent serve
one PostgreSQL database at once, this working tree and a later release copied beside it (tests/releases.py). A later
release of the same durable-run format finishes the runs of a replica of this one that died; a release of the next
format leaves them to this one's replicas while one serves, and once none does, ends them as failed with one line
that their tasks (both eras) and `meta-agent runs` show. Never interrupted for good, even with twenty runs waiting on
approvals when every replica is replaced."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from fake_llm import FakeLLM, openai_reply
from postgres_cluster import Cluster
from releases import installed
from replicas import done_run, fault_config, replica, replica_environ
from task_hosts import LEGACY, MODERN, TERMINAL, Caller, caller, updated
from test_durable import run_until_killed

from meta_agent.durable.format import APPLICATION_VERSION
from meta_agent.store.run_index import NOT_RESUMABLE

pytestmark = pytest.mark.anyio

BOUND = 90.0  # three replicas starting on a loaded 2-core machine, a takeover and a model turn fit in it
RUNS = 20  # runs waiting on approvals when a deploy replaces every replica


def runs_listing(environ: dict[str, str], *args: str) -> list[str]:
    """`meta-agent runs ARGS` as the release of `environ` says it: its lines."""
    done = subprocess.run(
        [sys.executable, "-m", "meta_agent", "runs", *args], env=environ, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


async def test_a_later_release_of_the_same_format_finishes_a_run_whose_replica_was_killed(
    database_url: str, pg_cluster: Cluster, llm: FakeLLM, tmp_path: Path
) -> None:
    """Killed in its second tool call on a replica of this release, the run is finished by a replica of release
    0.2.0, of the same format: the change made before the kill is not made again, and no model turn is asked
    twice."""
    later = installed(tmp_path, "0.2.0")
    assert later.application_version == APPLICATION_VERSION
    changes, there = tmp_path / "changes.txt", tmp_path / "there"
    config = fault_config(tmp_path, {"append": "always"})
    environ = {**replica_environ(llm, database_url, tmp_path), "META_AGENT_LEASE_SECONDS": "1"}
    llm.reply(openai_reply(None, ("c1", "f__append", {"path": str(changes), "text": "changed"})))
    llm.reply(openai_reply(None, ("c2", "f__wait_for_file", {"path": str(there)})))
    llm.reply(openai_reply("All done."))
    with (
        replica(config, environ) as (doomed, doomed_url, _),
        replica(config, {**environ, **later.environ}) as (_, later_url, log),
    ):
        await run_until_killed(doomed_url, "Change it, then wait.", f"waiting for {there}", doomed)
        there.touch()
        run_id = pg_cluster.psql(database_url, "select id from runs")
        run = await done_run(later_url, run_id, within=BOUND)
        assert log.count("run_resumed") == 1
    assert run["error"] is None and run["result"]["answer"] == "All done.", run
    assert changes.read_text() == "changed\n"
    assert len(llm.requests) == 3
    workflow = f"select application_version from dbos.workflow_status where workflow_uuid = '{run_id}'"
    assert pg_cluster.psql(database_url, workflow) == APPLICATION_VERSION


async def test_a_run_of_the_older_format_is_left_to_its_replicas_while_one_serves_then_ended_as_failed(
    database_url: str, pg_cluster: Cluster, llm: FakeLLM, tmp_path: Path
) -> None:
    """A rolling deploy to release 0.2.0, whose format changed. A run of this release whose replica is killed is
    handed on by the newer replica and finished by the other of this release. Then that one is stopped too (SIGTERM),
    while its task waits on an approval: the newer replica ends the run as failed, and says why through the task in
    both eras, `meta-agent://runs/…` and `meta-agent runs`; DBOS will not resume it."""
    newer = installed(tmp_path, "0.2.0", next_format=True)
    assert newer.application_version != APPLICATION_VERSION
    changes, there = tmp_path / "changes.txt", tmp_path / "there"
    config = fault_config(tmp_path, {"append": "always"})
    environ = replica_environ(llm, database_url, tmp_path)
    # The killed replica's mark lapses a second after it dies. The surviving replica of this release takes no lapsed
    # run for a lease (30 s) after it starts: the newer one, which looks every second, is the one that takes the run
    # and hands it on; the row it marks for its lease (3 s) leaves the other time to start the run before it lapses.
    doomed_env = {**environ, "META_AGENT_LEASE_SECONDS": "1"}
    steady = {**environ, "META_AGENT_LEASE_SECONDS": "30"}
    newer_env = {**environ, **newer.environ, "META_AGENT_LEASE_SECONDS": "3"}
    llm.reply(openai_reply(None, ("c1", "f__append", {"path": str(changes), "text": "changed"})))
    llm.reply(openai_reply(None, ("c2", "f__wait_for_file", {"path": str(there)})))
    llm.reply(openai_reply("All done."))
    with (
        replica(config, doomed_env) as (doomed, doomed_url, _),
        replica(config, steady) as (older, older_url, older_log),
        replica(config, newer_env) as (_, newer_url, newer_log),
    ):
        await run_until_killed(doomed_url, "Change it, then wait.", f"waiting for {there}", doomed)
        there.touch()
        run_id = pg_cluster.psql(database_url, "select id from runs")
        run = await done_run(newer_url, run_id, within=BOUND)
        assert run["error"] is None and run["result"]["answer"] == "All done.", run
        assert changes.read_text() == "changed\n"
        assert newer_log.count("run_left_to_its_format") == 1 and older_log.count("run_resumed") == 1
        assert newer_log.count("run_resumed") == 0
        # the last replica of this release stops while a task of its waits on an approval
        llm.reply(openai_reply(None, ("c3", "f__delete_file", {"path": "/a"})))
        async with caller(older_url, MODERN) as maker:
            task_id = await maker.start("agent", "Delete /a.")
            await maker.until(task_id, lambda read: read["status"] == "input_required")
        older.terminate()
        assert await anyio.to_thread.run_sync(older.wait, 30) == 143
        async with caller(newer_url, MODERN) as new, caller(newer_url, LEGACY) as old:
            await ended_by_the_upgrade(new, old, task_id)
        assert newer_log.count("run_not_resumable") == 1
    assert len(llm.requests) == 4  # the three turns of the first run, and the task's one: none again
    status = f"select status from dbos.workflow_status where workflow_uuid = '{task_id}'"
    assert pg_cluster.psql(database_url, status) == "CANCELLED"
    release_environ = {**environ, **newer.environ}
    listing = runs_listing(release_environ, "--all")
    line = next(index for index, text in enumerate(listing) if text.split()[:1] == [task_id])
    assert " error " in listing[line] and listing[line + 1] == f"    failed: {NOT_RESUMABLE}", listing
    told = runs_listing(release_environ, "show", task_id, "--all")  # its trace is on this machine
    assert told[-1] == f"then, says the run index: failed · {NOT_RESUMABLE}", told


async def declined_again(host: Caller, task_id: str) -> dict[str, Any]:
    """Poll the resumed task through `host` (2026-07-28) until it ends, declining each approval it asks (again: the
    replica that asked first is gone); the last reading. A question of the stopped replica that is still shown for a
    moment is declined too: it is not pending any more, and that answer is dropped."""
    answered: set[str] = set()
    with anyio.fail_after(BOUND):
        while (read := await host.task(task_id))["status"] not in TERMINAL:
            for key in read.get("inputRequests", {}) if read["status"] == "input_required" else ():
                if key not in answered:
                    answered.add(key)
                    await updated(host, task_id, {key: {"action": "decline"}})
            await anyio.sleep(0.1)  # polling, as a host does
    assert answered, read  # it asked again
    return dict(read)


async def ended_by_the_upgrade(new: Caller, old: Caller, task_id: str) -> None:
    """The task ended failed, saying why in one line, as 2026-07-28 (`tasks/get`) and 2025-11-25 (`tasks/get`,
    `tasks/result`) show it."""
    seen = await new.until(task_id, lambda read: read["status"] in TERMINAL, within=BOUND)
    assert set(seen.statuses[:-1]) <= {"working", "input_required"}, seen
    ended = seen[-1]
    assert ended["status"] == "failed" and ended["statusMessage"] == NOT_RESUMABLE, ended
    assert ended["error"]["message"] == NOT_RESUMABLE and "result" not in ended, ended
    legacy = await old.task(task_id)
    assert legacy["status"] == "failed" and legacy["statusMessage"] == NOT_RESUMABLE, legacy
    error = await old.error("tasks/result", {"taskId": task_id})
    assert error["code"] == -32603 and error["message"] == f"task {task_id} has no result: {NOT_RESUMABLE}", error


@pytest.mark.parametrize("next_format", [False, True], ids=["same format", "next format"])
async def test_a_deploy_that_replaces_every_replica_while_twenty_runs_wait_on_approvals_strands_none(
    next_format: bool, database_url: str, pg_cluster: Cluster, llm: FakeLLM, tmp_path: Path
) -> None:
    """Twenty tasks wait on approvals on the one replica of this release; release 0.2.0 starts beside it, and it is
    stopped (SIGTERM). Of the same format, the new replica resumes each run once and finishes it as its task (the
    approval asked again of the task's caller, who declines it through the new replica); of the next, it ends each as failed, saying why, and `meta-agent runs` lists
    them so. None is left interrupted."""
    release = installed(tmp_path, "0.2.0", next_format=next_format)
    config = fault_config(tmp_path)
    environ = {**replica_environ(llm, database_url, tmp_path), "META_AGENT_LEASE_SECONDS": "3"}
    for number in range(RUNS):
        llm.reply(openai_reply(None, (f"c{number}", "f__delete_file", {"path": f"/{number}"})))
    for _ in range(RUNS):
        llm.reply(openai_reply("Not deleted."))  # a resumed run's next turn
    with replica(config, environ) as (old_replica, old_url, _):
        async with caller(old_url, MODERN) as maker:
            tasks = [await maker.start("agent", f"Delete /{number}.") for number in range(RUNS)]
            for task_id in tasks:
                await maker.until(task_id, lambda read: read["status"] == "input_required", within=BOUND)
        with replica(config, {**environ, **release.environ}) as (_, new_url, log):
            old_replica.terminate()
            assert await anyio.to_thread.run_sync(old_replica.wait, 30) == 143
            async with caller(new_url, MODERN) as new, caller(new_url, LEGACY) as old:
                for task_id in tasks:
                    if next_format:
                        await ended_by_the_upgrade(new, old, task_id)
                    else:
                        read = await declined_again(new, task_id)
                        assert read["status"] == "completed", read
                        assert read["result"]["structuredContent"]["answer"] == "Not deleted."
            assert log.count("run_resumed") == (0 if next_format else RUNS)  # each resumed once, or none
    ended = pg_cluster.psql(database_url, "select status, error from runs group by status, error")
    assert ended == (f"done|{NOT_RESUMABLE}" if next_format else "done|"), ended
    assert len(llm.requests) == (RUNS if next_format else 2 * RUNS)
    if next_format:
        listing = runs_listing({**environ, **release.environ}, "--all")
        assert listing.count(f"    failed: {NOT_RESUMABLE}") == RUNS, listing
        cancelled = "select count(*) from dbos.workflow_status where status = 'CANCELLED'"
        assert pg_cluster.psql(database_url, cancelled) == str(RUNS)
