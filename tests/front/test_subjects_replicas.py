"""Each subject's state is its own across replicas: real `meta-agent serve --transport http` replicas on one
PostgreSQL database, two subjects (their Authorization headers, no META_AGENT_HTTP_TOKEN set) speaking through
either replica with the SDK's real Client in both protocol eras. Neither sees the other's conversations, runs or
parked rounds, through whichever replica; and a run whose replica died, finished by the other, is still its
subject's (its conversation too)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as t
import pytest
from fake_llm import FakeLLM, openai_reply
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from postgres_cluster import Cluster
from replicas import fault_config, replica, replica_environ

pytestmark = pytest.mark.anyio

BOUND = 60.0
HELD = 300.0  # a model reply held this long: until its replica is killed, in practice
ALICE, BOB = {"Authorization": "Bearer alice"}, {"Authorization": "Bearer bob"}
MADE_UP = "01KMADEUP0000000000000000Z"


async def never_asked(_ctx: Any, _params: Any) -> t.ElicitResult:
    raise AssertionError("the rounds are driven by hand")  # the callback only declares elicitation


@asynccontextmanager
async def caller(url: str, headers: dict[str, str], era: str = "2026-07-28") -> AsyncIterator[Client]:
    mode = "legacy" if era == "legacy" else "auto"
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(BOUND, read=HELD)) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode, elicitation_callback=never_asked) as client,
    ):
        yield client


def text_of(result: t.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, t.TextContent))


async def refused_as_unknown(client: Client, conversation: str, run_id: str) -> None:
    """`client` continuing `conversation` and reading `run_id` gets exactly what made-up ids get."""
    theirs = await client.call_tool("agent", {"task": "And then?", "conversation_id": conversation})
    nobodys = await client.call_tool("agent", {"task": "And then?", "conversation_id": MADE_UP})
    assert theirs.is_error and text_of(theirs) == text_of(nobodys).replace(MADE_UP, conversation), theirs
    errors = []
    for run in (run_id, MADE_UP):
        with pytest.raises(MCPError) as refused:
            await client.read_resource(f"meta-agent://runs/{run}")
        errors.append((refused.value.error.code, refused.value.error.message.replace(run, "RUN")))
    assert errors[0] == errors[1], errors


async def run_state(client: Client, run_id: str) -> str:
    read = await client.read_resource(f"meta-agent://runs/{run_id}")
    [contents] = read.contents
    assert isinstance(contents, t.TextResourceContents)
    return contents.text


@pytest.mark.parametrize("era", ["2026-07-28", "legacy"])
async def test_two_subjects_on_two_replicas_cannot_see_each_others_state(
    era: str, database_url: str, llm: FakeLLM, tmp_path: Path
) -> None:
    """Alice's conversation and run, made on one replica, are unknown to Bob on both; Alice goes on with them on the
    other. A 2026-07-28 round of Alice's asked on one replica, retried by Bob with her request state through the
    other, is refused as a forged one; her own retry there answers it."""
    config = fault_config(tmp_path)
    environ = replica_environ(llm, database_url, tmp_path)
    llm.reply(openai_reply("The number is 42."))
    llm.reply(openai_reply("It was 42."))
    llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": "/a"})))
    llm.reply(openai_reply("Deleted."))
    with replica(config, environ) as (_, one, _), replica(config, environ) as (_, other, _):
        async with caller(one, ALICE, era) as alice:
            first = await alice.call_tool("agent", {"task": "Remember the number 42."})
        assert first.structured_content is not None, first
        conversation, run_id = first.structured_content["conversation_id"], first.structured_content["run_id"]
        for url in (one, other):
            async with caller(url, BOB, era) as bob:
                await refused_as_unknown(bob, conversation, run_id)
        async with caller(other, ALICE, era) as alice:
            assert '"status": "done"' in await run_state(alice, run_id)
            second = await alice.call_tool("agent", {"task": "What was it?", "conversation_id": conversation})
            assert text_of(second) == "It was 42.", second
        assert len(llm.requests) == 2

        async with caller(one, ALICE) as alice:
            asked = await alice.session.call_tool("agent", {"task": "Delete /a."}, allow_input_required=True)
        assert isinstance(asked, t.InputRequiredResult) and asked.request_state, asked
        allow = {"approval": t.ElicitResult(action="accept", content={"decision": "allow_once"})}
        errors = []
        async with caller(other, BOB) as bob:
            for state in (asked.request_state, asked.request_state[:-4] + "AAAA"):
                with pytest.raises(MCPError) as refused:
                    await bob.session.call_tool(
                        "agent",
                        {"task": "Delete /a."},
                        allow_input_required=True,
                        input_responses=allow,
                        request_state=state,
                    )
                errors.append((refused.value.error.code, refused.value.error.message))
        assert errors[0] == errors[1], errors
        assert len(llm.requests) == 3  # the run still waits for Alice's answer
        async with caller(other, ALICE) as alice:
            last = await alice.session.call_tool(
                "agent",
                {"task": "Delete /a."},
                allow_input_required=True,
                input_responses=allow,
                request_state=asked.request_state,
            )
        assert isinstance(last, t.CallToolResult) and text_of(last) == "Deleted.", last
    assert [m["content"] for m in llm.requests[-1].body["messages"] if m["role"] == "tool"] == ["deleted /a"]


async def test_a_run_resumed_on_the_other_replica_stays_its_subjects(
    database_url: str, pg_cluster: Cluster, llm: FakeLLM, tmp_path: Path
) -> None:
    """Alice's run waits on its model turn when its replica is SIGKILLed; the other resumes and finishes it. Its
    row and the conversation it started are still Alice's: she reads the run and continues the conversation there;
    Bob is told both are unknown."""
    config = fault_config(tmp_path)
    environ = replica_environ(llm, database_url, tmp_path)
    doomed_env, other_env = {**environ, "META_AGENT_LEASE_SECONDS": "1"}, {**environ, "META_AGENT_LEASE_SECONDS": "3"}
    llm.reply(openai_reply("never seen"), delay=HELD)
    llm.reply(openai_reply("All done."))
    llm.reply(openai_reply("Still done."))
    with replica(config, doomed_env) as (doomed, doomed_url, _), replica(config, other_env) as (_, other, log):
        async with anyio.create_task_group() as tg:

            async def doomed_call() -> None:
                try:
                    async with caller(doomed_url, ALICE) as alice:
                        await alice.call_tool("agent", {"task": "Say it is all done."})
                except Exception:  # its replica is killed under it
                    pass

            tg.start_soon(doomed_call)
            with anyio.fail_after(BOUND):
                while not llm.requests:
                    await anyio.sleep(0.05)  # polling the fake model: the doomed replica's turn is held
            doomed.kill()
            await anyio.to_thread.run_sync(doomed.wait, 30)
            tg.cancel_scope.cancel()
        run_id = pg_cluster.psql(database_url, "select id from runs")
        async with caller(other, ALICE) as alice:
            with anyio.fail_after(BOUND):
                while '"status": "done"' not in (state := await run_state(alice, run_id)):
                    await anyio.sleep(0.1)  # polling the run, as a caller whose connection died does
            assert '"answer": "All done."' in state, state
            conversation = pg_cluster.psql(database_url, "select id from conversations")
            again = await alice.call_tool("agent", {"task": "Still?", "conversation_id": conversation})
            assert text_of(again) == "Still done.", again
        async with caller(other, BOB) as bob:
            await refused_as_unknown(bob, conversation, run_id)
    assert log.count("run_resumed") == 1
    assert len(llm.requests) == 3
