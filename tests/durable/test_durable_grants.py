"""A tool the person at the terminal trusted for the rest of a durable run (`meta-agent run`, answer `t`) stays
trusted when the run is resumed by a replica after its process died (durable/steps.py `_Approvals`): the
replayed verdict grants it again, where nobody is left to ask. The run is the local user's (it was made off HTTP):
it is read from the run index as that user, not through an HTTP caller, whose runs are its own."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest
from conftest import http_serving
from fake_llm import FakeLLM, openai_reply
from postgres_cluster import Cluster
from pty_terminal import META_AGENT, PROMPT, Terminal
from replicas import fault_config, replica_environ

from meta_agent.store.database import LOCAL_OWNER, PostgresDatabase
from meta_agent.store.run_index import RunIndex

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX"),
]


async def test_a_tool_trusted_for_the_rest_of_a_run_stays_trusted_when_a_replica_resumes_it(
    database_url: str, pg_cluster: Cluster, llm: FakeLLM, tmp_path: Path
) -> None:
    changes, there = tmp_path / "changes.txt", tmp_path / "there"
    config = fault_config(tmp_path)
    environ = replica_environ(llm, database_url, tmp_path) | {"META_AGENT_LEASE_SECONDS": "1", "NO_COLOR": "1"}
    llm.reply(openai_reply(None, ("c1", "f__append", {"path": str(changes), "text": "first"})))
    llm.reply(openai_reply(None, ("c2", "f__wait_for_file", {"path": str(there)})))
    llm.reply(openai_reply(None, ("c3", "f__append", {"path": str(changes), "text": "second"})))
    llm.reply(openai_reply("All done."))
    term = Terminal([*META_AGENT, "run", "Change it twice.", "--config", str(config)], environ)
    try:
        term.wait_for(PROMPT)
        term.type("t\n")  # trust f.append for the rest of this run
        term.wait_for(f"waiting for {there}")
    finally:
        term.proc.kill()
        term.finish()
    assert changes.read_text() == "first\n"
    run_id = pg_cluster.psql(database_url, "select id from runs")
    there.touch()
    index = RunIndex(PostgresDatabase(database_url), "reader")
    with http_serving(config, environ):
        with anyio.fail_after(60):
            while (state := await index.read(run_id, owner=LOCAL_OWNER)) is None or state.status != "done":
                await anyio.sleep(0.1)  # polling the run's status in the index, as `meta-agent runs show` reads it
    index.database.close()
    assert state.result is not None, state.error
    assert state.result["answer"] == "All done."
    calls = [(call["name"], call["ok"]) for step in state.result["steps"] for call in step["tool_calls"]]
    assert calls == [("f.append", True), ("f.wait_for_file", True), ("f.append", True)]
    assert changes.read_text() == "first\nsecond\n"  # the first made once, the second allowed without asking
