"""Approvals of 2026-07-28 callers answered through any replica (store/parking.py): real
`meta-agent serve --transport http` replicas on one PostgreSQL database, a run parked on one and its rounds driven
through the other, as a load balancer without sticky sessions would spread them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import mcp.types as t
import pytest
from conftest import ProgressLog
from fake_llm import FakeLLM, openai_reply
from mcp import Client
from postgres_cluster import Cluster
from replicas import done_run, fault_config, replica, replica_environ

pytestmark = pytest.mark.anyio


async def decline(_ctx: Any, _params: Any) -> t.ElicitResult:
    raise AssertionError("the rounds are driven by hand")  # the callback only declares elicitation


def accept(decision: str) -> dict[str, t.InputResponse]:
    return {"approval": t.ElicitResult(action="accept", content={"decision": decision})}


async def round_(
    url: str,
    state: str | None = None,
    decision: str | None = None,
    progress: ProgressLog | None = None,
    **arguments: Any,
) -> Any:
    """One round of an `agent` call on the replica at `url`, as a caller of its own (no session to share)."""
    async with Client(url, elicitation_callback=decline) as client:
        assert client.protocol_version == "2026-07-28"
        return await client.session.call_tool(
            "agent",
            {"task": "delete files", **arguments},
            allow_input_required=True,
            input_responses=accept(decision) if decision else None,
            request_state=state,
            progress_callback=progress,
        )


def asked_about(result: Any) -> str:
    assert isinstance(result, t.InputRequiredResult), result
    return result.input_requests["approval"].params.message  # type: ignore[union-attr,no-any-return]


@pytest.mark.parametrize("last_round_on", ["the replica running it", "the other replica"])
async def test_an_approval_asked_by_one_replica_is_answered_through_the_other(
    last_round_on: str, database_url: str, pg_cluster: Cluster, llm_endpoint: FakeLLM, tmp_path: Path
) -> None:
    config = fault_config(tmp_path)
    environ = replica_environ(llm_endpoint, database_url, tmp_path)
    llm_endpoint.clear()
    calls = (("c1", "f__delete_file", {"path": "/a"}), ("c2", "f__delete_file", {"path": "/b"}))
    llm_endpoint.reply(openai_reply(None, *calls))
    llm_endpoint.reply(openai_reply("One deleted."))
    with replica(config, environ) as (_, one, _), replica(config, environ) as (_, other, _):
        first = await round_(one)
        assert "/a" in asked_about(first)
        heard = ProgressLog()
        second = await round_(other, first.request_state, "allow_once", heard)  # the run is parked on `one`
        assert "/b" in asked_about(second)
        assert any("f.delete_file" in message for message in heard.messages), heard.messages  # its progress came
        replay = await round_(other, first.request_state, "allow_once")
        assert isinstance(replay, t.CallToolResult) and replay.is_error
        assert "answered already" in replay.content[0].text  # type: ignore[union-attr]
        replay = await round_(one, first.request_state, "allow_once")
        assert isinstance(replay, t.CallToolResult) and replay.is_error
        last = await round_(one if last_round_on == "the replica running it" else other, second.request_state, "deny")
        assert isinstance(last, t.CallToolResult) and not last.is_error, last
        assert last.structured_content is not None and last.structured_content["answer"] == "One deleted."
    results = [m["content"] for m in llm_endpoint.requests[-1].body["messages"] if m["role"] == "tool"]
    assert results == [
        "deleted /a",
        "[error] the user did not allow f.delete_file (denied); do without it, or ask the user",
    ]
    # every round's row is gone once the result was collected
    assert pg_cluster.psql(database_url, "select count(*) from parked_rounds") == "0"


async def test_a_round_waiting_on_one_replica_for_a_run_whose_replica_is_killed_says_where_to_read_it(
    database_url: str, pg_cluster: Cluster, llm_endpoint: FakeLLM, tmp_path: Path
) -> None:
    """The run goes on (durable), on the replica left: its approved change is not made again, and its result is
    read there."""
    changes, there = tmp_path / "changes.txt", tmp_path / "there"
    config = fault_config(tmp_path)
    environ = {**replica_environ(llm_endpoint, database_url, tmp_path), "META_AGENT_LEASE_SECONDS": "1"}
    llm_endpoint.clear()
    llm_endpoint.reply(openai_reply(None, ("c1", "f__append", {"path": str(changes), "text": "changed"})))
    llm_endpoint.reply(openai_reply(None, ("c2", "f__wait_for_file", {"path": str(there)})))
    llm_endpoint.reply(openai_reply("All done."))
    with replica(config, environ) as (doomed, doomed_url, _), replica(config, environ) as (_, other, _):
        first = await round_(doomed_url)
        assert "f.append" in asked_about(first)
        heard = ProgressLog()
        answered: list[Any] = []

        async def answer_through_the_other() -> None:
            answered.append(await round_(other, first.request_state, "allow_once", heard))

        async with anyio.create_task_group() as tg:
            tg.start_soon(answer_through_the_other)
            await heard.until(f"waiting for {there}", timeout=60)  # the run's progress, heard through `other`
            doomed.kill()
        [stopped] = answered
        run_id = pg_cluster.psql(database_url, "select id from runs")
        assert isinstance(stopped, t.CallToolResult) and stopped.is_error
        assert stopped.content[0].text == (  # type: ignore[union-attr]
            f"the replica running this call stopped before the call ended; read meta-agent://runs/{run_id} for how "
            "its run ended"
        )
        there.touch()
        run = await done_run(other, run_id)  # as the caller told where to read it would
    assert run["error"] is None and run["result"]["answer"] == "All done.", run
    assert changes.read_text() == "changed\n"  # approved once, made once


async def test_a_tool_allowed_for_the_conversation_on_one_replica_is_not_asked_again_on_the_other(
    database_url: str, llm_endpoint: FakeLLM, tmp_path: Path
) -> None:
    config = fault_config(tmp_path)
    environ = replica_environ(llm_endpoint, database_url, tmp_path)
    llm_endpoint.clear()
    for path in ("/a", "/b"):
        llm_endpoint.reply(openai_reply(None, ("c1", "f__delete_file", {"path": path})))
        llm_endpoint.reply(openai_reply(f"done with {path}"))
    with replica(config, environ) as (_, one, _), replica(config, environ) as (_, other, _):
        first = await round_(one)
        assert "for the rest of this conversation" in str(first.input_requests["approval"].params.requested_schema)
        done = await round_(one, first.request_state, "allow_session")
        assert isinstance(done, t.CallToolResult) and not done.is_error, done
        assert done.structured_content is not None
        heard = ProgressLog()
        again = await round_(other, progress=heard, conversation_id=done.structured_content["conversation_id"])
        assert isinstance(again, t.CallToolResult), again  # not asked: no input-required round
        assert again.structured_content is not None and again.structured_content["answer"] == "done with /b"
        assert "step 1 · f.delete_file allowed: already allowed for this conversation" in heard.messages
        assert not [m for m in heard.messages if "asking the user" in m], heard.messages  # nobody was asked
