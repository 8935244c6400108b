"""A durable run's time limit counts from its first start (durable/steps.py RunSteps.elapsed):
a run resumed after its replica died gets no fresh clock. Its replay meets the limit no earlier than the first
execution did, and the step after the replay is bounded by what is left of the limit, the downtime counted."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest
from conftest import http_serving
from fake_llm import FakeLLM, openai_reply
from postgres_cluster import Cluster
from replicas import done_run, fault_config, replica, replica_environ
from test_durable import run_until_killed

pytestmark = pytest.mark.anyio

TIME_LIMIT = 10.0
LATE = "cancelled: the run's time limit passed"


async def test_a_run_resumed_after_its_time_limit_passed_ends_at_the_limit_not_a_fresh_one(
    database_url: str, pg_cluster: Cluster, llm: FakeLLM, tmp_path: Path
) -> None:
    config = fault_config(tmp_path)
    environ = replica_environ(llm, database_url, tmp_path)
    environ |= {"META_AGENT_LEASE_SECONDS": "1", "META_AGENT_TIME_LIMIT": str(TIME_LIMIT)}
    there = tmp_path / "there"
    llm.reply(openai_reply(None, ("c1", "f__wait_for_file", {"path": str(there)})))
    llm.reply(openai_reply("All done."))
    started = time.monotonic()
    with replica(config, environ) as (doomed, doomed_url, _):
        await run_until_killed(doomed_url, "Wait for it.", f"waiting for {there}", doomed)
    run_id = pg_cluster.psql(database_url, "select id from runs")
    # no replica while the limit runs out; then the file the call waits for is there, so that a run resumed with a
    # fresh clock would find it at once and go on to an answer
    await anyio.sleep(max(0.0, started + TIME_LIMIT + 2 - time.monotonic()))  # the downtime being tested
    there.touch()
    with http_serving(config, environ) as (restarted, _):
        run = await done_run(f"{restarted}/mcp", run_id)
    result = run["result"]
    assert result is not None, run["error"]
    assert result["stop_reason"] == "deadline", result
    [call] = result["steps"][0]["tool_calls"]
    assert (call["name"], call["ok"], call["error"]) == ("f.wait_for_file", False, LATE)
    assert result["answer"] == "All done."  # the last turn, without tools, answered
