"""The count limits other than META_AGENT_MAX_TASKS (tests/front/test_task_limits.py), each hit by a burst of calls
made at once (issue 47), in memory: the runs of 2026-07-28 callers waiting for an answer (META_AGENT_MAX_PARKED) and
the runs started from views (META_AGENT_MAX_TASKS of them, PER_SUBJECT of one subject's). Exactly the limit is
taken, the rest get the one line, and the places come back. The console's calls at once (MAX_CALLS) are
tests/front/test_console.py's."""

from __future__ import annotations

from typing import Any

import anyio
import mcp.types as t
import pytest
from conftest import openai_env
from fake_llm import FakeLLM, openai_reply
from host_doubles import User, accept
from mcp import Client
from mcp.client.extension import advertise
from mcp.server.apps import APP_MIME_TYPE, EXTENSION_ID
from test_task_limits import held

from meta_agent.config.servers import Servers, WebhookEntry
from meta_agent.config.settings import Settings
from meta_agent.front.apps import views
from meta_agent.front.server import build_server

pytestmark = [pytest.mark.anyio, pytest.mark.quick]

LIMIT = 5
BOUND = 30.0
UI = [advertise(EXTENSION_ID, {"mimeTypes": [APP_MIME_TYPE]})]
# A webhook is an `ask` tool that needs no process: each run that calls it parks for the caller's answer. Its URL is
# never reached (the answer is always deny).
HOOK = Servers({}, webhooks={"hook": WebhookEntry(url="http://127.0.0.1:9/never")})
PARKED_FULL = (
    f"the run needs an answer, but {LIMIT:,} runs already wait for one (META_AGENT_MAX_PARKED); "
    "answer or abandon one of them, or call again later"
)


def text_of(result: t.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, t.TextContent))


async def at_once(count: int, call: Any) -> list[Any]:
    """`call(n)` for n in range(count), all at once: their results."""
    results: list[Any] = [None] * count

    async def one(n: int) -> None:
        results[n] = await call(n)

    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as calls:
            for n in range(count):
                calls.start_soon(one, n)
    return results


async def test_a_burst_parks_exactly_max_parked_runs_and_the_places_come_back(llm: FakeLLM) -> None:
    """50 calls at once whose runs each need an approval, at META_AGENT_MAX_PARKED=5: 5 park, 45 end at once with
    the one line. Once the 5 are answered (denied), another burst parks exactly 5 again."""
    for _ in range(5):  # the parked runs' last turns, after the denial (a request with the tool's result)
        llm.reply(openai_reply("not done: denied"), match='"tool_call_id"')
    for _ in range(100):
        llm.reply(openai_reply(None, ("c1", "webhooks__hook", {})))
    server = build_server(Settings(model="openai:fake-model", max_parked=LIMIT), HOOK, openai_env(llm))
    async with Client(server, elicitation_callback=User()) as client:

        async def call(n: int, state: str | None = None) -> t.CallToolResult | t.InputRequiredResult:
            responses = {"approval": accept("deny")} if state else None
            return await client.session.call_tool(
                "agent", {"task": f"run {n}"}, allow_input_required=True, input_responses=responses, request_state=state
            )

        first = await at_once(50, call)
        parked = [(n, round_) for n, round_ in enumerate(first) if isinstance(round_, t.InputRequiredResult)]
        denied = [await call(n, round_.request_state) for n, round_ in parked]
        second = await at_once(50, call)
    refused = [text_of(result) for result in first if isinstance(result, t.CallToolResult)]
    assert len(parked) == LIMIT and refused == [PARKED_FULL] * (50 - LIMIT)
    assert all(isinstance(result, t.CallToolResult) and text_of(result) == "not done: denied" for result in denied)
    assert sum(isinstance(round_, t.InputRequiredResult) for round_ in second) == LIMIT


async def test_a_burst_of_view_runs_starts_exactly_the_limit_and_the_places_come_back(llm: FakeLLM) -> None:
    """200 `app_start` calls at once at META_AGENT_MAX_TASKS=5: 5 runs start, 195 are refused in one line. Once the 5
    end, 5 start again, one after another, and the next is refused."""
    server = build_server(Settings(model="openai:fake-model", max_tasks=LIMIT), {}, openai_env(llm))
    with held(llm, LIMIT) as gate, held(llm, LIMIT):
        async with Client(server, extensions=UI) as client:

            async def start(n: int) -> t.CallToolResult:
                return await client.call_tool("app_start", {"task": f"run {n}", "mode": "ask"})

            first = await at_once(200, start)
            gate.set()  # the five end
            again = await admitted(client, LIMIT)
            refused = await start(0)
    said = [text_of(result) for result in first]
    full = f"{LIMIT} runs started from views are running already (META_AGENT_MAX_TASKS)"
    assert sum(line.endswith(" started") for line in said) == LIMIT and said.count(full) == 200 - LIMIT
    assert len(again) == LIMIT and text_of(refused) == full


async def test_a_burst_of_one_subjects_view_runs_starts_exactly_per_subject(llm: FakeLLM) -> None:
    server = build_server(Settings(model="openai:fake-model"), {}, openai_env(llm))
    with held(llm, views.PER_SUBJECT):
        async with Client(server, extensions=UI) as client:
            said = [
                text_of(result)
                for result in await at_once(
                    100, lambda n: client.call_tool("app_start", {"task": f"run {n}", "mode": "ask"})
                )
            ]
    mine = f"{views.PER_SUBJECT} of your runs started from views are running already; wait for one to end"
    assert sum(line.endswith(" started") for line in said) == views.PER_SUBJECT
    assert said.count(mine) == 100 - views.PER_SUBJECT


async def admitted(client: Client, count: int) -> list[str]:
    """`count` runs started from a view one after another, each as soon as a place is free."""
    started: list[str] = []
    with anyio.fail_after(BOUND):
        while len(started) < count:
            result = await client.call_tool("app_start", {"task": "again", "mode": "ask"})
            if result.is_error:
                await anyio.sleep(0.05)  # polling for the place, as the view's user would try again
            else:
                assert result.structured_content is not None
                started.append(result.structured_content["run_id"])
    return started
