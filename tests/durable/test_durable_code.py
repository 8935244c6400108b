"""Code mode on PostgreSQL (durable/steps.py): each call a program makes is a step of its own, so a replica killed in
the middle of a program leaves the run to another, which runs the program again with the recorded answers of the calls
that had completed: none of them is made twice, and the model is not asked again. Real `meta-agent serve --transport
http` replicas on one database, our fault server as the child."""

from __future__ import annotations

import contextlib
from pathlib import Path

import anyio
import pytest
from conftest import ProgressLog, http_serving
from fake_llm import FakeLLM, openai_reply
from host_doubles import User, accept
from mcp import Client
from postgres_cluster import Cluster
from replicas import done_run, fault_config, replica, replica_environ

pytestmark = pytest.mark.anyio


def program(changes: Path) -> str:
    """Three changes, each fed the answer of the one before, then a slow call the replica is killed in."""
    return (
        "said = 'start'\n"
        "for i in range(3):\n"
        f"    said = call_tool('f.append', {{'path': {str(changes)!r}, 'text': f'{{i}} after {{said}}'}})['result']\n"
        "call_tool('f.slow', {'seconds': 1.5, 'steps': 3})\n"
        "print('made 3 changes; the last said:', said)"
    )


@pytest.mark.parametrize("trust", ["always", "ask"], ids=["trusted", "asked"])
async def test_a_replica_killed_mid_program_is_finished_by_another_and_no_completed_call_is_made_again(
    trust: str, database_url: str, pg_cluster: Cluster, llm: FakeLLM, tmp_path: Path
) -> None:
    """`asked`: each change is approved by the user first; the replica resuming the run, which has nobody to ask,
    gets each recorded approval back and asks nobody."""
    changes = tmp_path / "changes.txt"
    config = fault_config(tmp_path, {"append": trust})
    environ = {**replica_environ(llm, database_url, tmp_path), "META_AGENT_LEASE_SECONDS": "1"}
    llm.reply(openai_reply(None, ("c1", "run_code", {"code": program(changes)})))
    llm.reply(openai_reply("Three changes made."))
    progress = ProgressLog()
    user = User(*[accept("allow_once")] * 3)

    async def call_and_lose_it(url: str) -> None:
        with contextlib.suppress(Exception):  # the connection dies with the replica
            async with Client(url, elicitation_callback=user) as client:
                await client.call_tool("agent", {"task": "Change it thrice.", "code": True}, progress_callback=progress)

    with replica(config, environ) as (doomed, doomed_url, _), http_serving(config, environ) as (other, _):
        async with anyio.create_task_group() as tg:
            tg.start_soon(call_and_lose_it, doomed_url)
            await progress.until("step 1 of 3", timeout=60)  # in the slow call: the three changes have completed
            doomed.send_signal(9)
            await anyio.to_thread.run_sync(doomed.wait, 30)
            tg.cancel_scope.cancel()
        lines = ["0 after start", f"1 after appended to {changes}", f"2 after appended to {changes}"]
        assert changes.read_text().splitlines() == lines
        run_id = pg_cluster.psql(database_url, "select id from runs")
        run = await done_run(f"{other}/mcp", run_id)
        assert run["error"] is None and run["result"]["answer"] == "Three changes made.", run
        [step, _] = run["result"]["steps"]
        assert [call["name"] for call in step["tool_calls"]] == [
            "run_code",
            "f.append",
            "f.append",
            "f.append",
            "f.slow",
        ]
        assert changes.read_text().splitlines() == lines  # each made once, by the replica that was killed
        assert len(llm.requests) == 2  # the program's turn was not asked again
        assert len(user.asked) == (3 if trust == "ask" else 0)
        told = llm.requests[-1].body["messages"][-1]["content"]
        assert told == f"made 3 changes; the last said: appended to {changes}\n"
