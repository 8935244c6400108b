"""What a hostile host, app or other subject does with the apps' tools (front/apps): our server over real HTTP in
this process with the SDK's real Client in both eras, two subjects told apart by their Authorization headers, the
fault fixture child and the real openai SDK against a fake model.

Another subject's run, question, or call id is unknown to a view, as a made-up one is; a flood of polls is answered,
with the database read by at most a few at once; ids and arguments of any size are bounded."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as t
import pytest
from conftest import fault_entry, openai_env, serving_asgi
from fake_llm import FakeLLM, openai_reply
from host_doubles import call_ids
from mcp import Client
from mcp.client.extension import advertise
from mcp.client.streamable_http import streamable_http_client
from mcp.server.apps import APP_MIME_TYPE, EXTENSION_ID
from test_apps import app, pending_of

from meta_agent.config.settings import Settings
from meta_agent.front.apps import views
from meta_agent.front.http.app import http_app
from meta_agent.front.server import build_server
from meta_agent.store.run_events import RunEvents

pytestmark = pytest.mark.anyio
UI = [advertise(EXTENSION_ID, {"mimeTypes": [APP_MIME_TYPE]})]
ERAS = {"2026-07-28": "auto", "2025-11-25": "legacy"}
MADE_UP = "01KMADEUP0000000000000000Z"


@asynccontextmanager
async def served(llm: FakeLLM, tmp_path: Path) -> AsyncIterator[str]:
    settings = Settings(model="openai:fake-model", conversations_db=tmp_path / "state.sqlite3")
    server = build_server(settings, {"f": fault_entry()}, openai_env(llm))
    async with serving_asgi(lambda _url: http_app(server, host="127.0.0.1"), 60) as url:
        yield f"{url}/mcp"


@asynccontextmanager
async def host(url: str, era: str, who: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {who}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60, read=300)) as http,
        Client(streamable_http_client(url, http_client=http), mode=ERAS[era], extensions=UI) as client,
    ):
        yield client


def error_of(result: t.CallToolResult) -> str:
    assert result.is_error
    return "".join(block.text for block in result.content if isinstance(block, t.TextContent))


@pytest.mark.parametrize("era", list(ERAS))
async def test_another_subjects_run_and_question_are_unknown(era: str, llm: FakeLLM, tmp_path: Path) -> None:
    """Bob, given Alice's run id, question key and call id, learns nothing and answers nothing: exactly what a
    made-up id gets. Alice's question stays hers to answer."""
    llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": "/tmp/x"})))
    llm.reply(openai_reply("finished"))
    async with (
        served(llm, tmp_path) as url,
        host(url, era, "alice") as alice,
        host(url, era, "bob") as bob,
        anyio.create_task_group() as tg,
    ):
        results: list[t.CallToolResult] = []

        async def call() -> None:
            with call_ids(alice, "same-id"):
                results.append(await alice.call_tool("agent", {"task": "delete /tmp/x"}))

        tg.start_soon(call)
        run_id, question = await pending_of(alice, "same-id")
        theirs = await bob.call_tool("app_run", {"run_id": run_id})
        made_up = await bob.call_tool("app_run", {"run_id": MADE_UP})
        by_call = await app(bob, "app_run", request_id="same-id")
        answer = await bob.call_tool("app_answer", {"run_id": run_id, "key": question["key"], "decision": "approve"})
        listed = await app(bob, "app_runs")
        still = await app(alice, "app_run", run_id=run_id)
        await app(alice, "app_answer", run_id=run_id, key=question["key"], decision="deny")
    assert error_of(theirs) == f"unknown run {run_id!r}" and error_of(made_up) == f"unknown run {MADE_UP!r}"
    assert by_call["run"] is None and listed["runs"] == []
    assert error_of(answer) == f"no question {question['key']!r} of run {run_id!r}"
    assert [q["key"] for q in still["pending"]] == [question["key"]]
    assert results[0].structured_content["steps"][0]["tool_calls"][0]["ok"] is False  # type: ignore[index]


async def test_a_flood_of_polls_is_answered_reading_a_few_at_once(
    llm: FakeLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """500 polls at once from one host: every one answered, the database read by at most READERS at a time."""
    reading = most = 0
    page = RunEvents.page

    async def counted(self: RunEvents, run_id: str, after: int) -> Any:
        nonlocal reading, most
        reading += 1
        most = max(most, reading)
        try:
            await anyio.sleep(0.001)  # a read that takes a moment, so that polls overlap
            return await page(self, run_id, after)
        finally:
            reading -= 1

    monkeypatch.setattr(RunEvents, "page", counted)
    llm.reply(openai_reply("hi"))
    async with served(llm, tmp_path) as url, host(url, "2026-07-28", "alice") as alice:
        run_id = (await alice.call_tool("ask", {"prompt": "hi"})).structured_content["run_id"]  # type: ignore[index]
        answers: list[dict[str, Any]] = []

        async def poll() -> None:
            answers.append(await app(alice, "app_run", run_id=run_id))

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for _ in range(500):
                    tg.start_soon(poll)
    assert len(answers) == 500 and all(answer["run"]["status"] == "done" for answer in answers)
    assert 1 <= most <= views.READERS


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"request_id": "x" * 2000}, "request_id: longer than 1000 characters"),
        ({"run_id": "y" * 5000}, "run_id"),
        ({"after": -1}, "after"),
        ({}, "give run_id, or request_id (the id of the tools/call whose run to show)"),
    ],
)
async def test_odd_arguments_are_one_line_errors(
    arguments: dict[str, Any], error: str, llm: FakeLLM, tmp_path: Path
) -> None:
    settings = Settings(model="openai:fake-model", conversations_db=tmp_path / "state.sqlite3")
    async with Client(build_server(settings, {}, openai_env(llm)), extensions=UI) as client:
        said = error_of(await client.call_tool("app_run", arguments))
    assert error in said and "\n" not in said


async def test_a_view_cannot_start_more_runs_than_the_cap(llm: FakeLLM, tmp_path: Path) -> None:
    settings = Settings(model="openai:fake-model", conversations_db=tmp_path / "s.sqlite3", max_tasks=1)
    llm.reply(openai_reply("slow"), delay=60)  # the first run holds its place until the server stops
    async with Client(build_server(settings, {}, openai_env(llm)), extensions=UI) as client:
        first = await app(client, "app_start", task="one", mode="ask")
        refused = await client.call_tool("app_start", {"task": "two", "mode": "ask"})
    assert first["run_id"]
    assert error_of(refused) == "1 runs started from views are running already (META_AGENT_MAX_TASKS)"


async def test_one_subject_cannot_take_every_place_for_runs_started_in_views(llm: FakeLLM, tmp_path: Path) -> None:
    settings = Settings(model="openai:fake-model", conversations_db=tmp_path / "s.sqlite3")
    for _ in range(views.PER_SUBJECT):
        llm.reply(openai_reply("slow"), delay=60)  # each run holds its place until the server stops
    async with Client(build_server(settings, {}, openai_env(llm)), extensions=UI) as client:
        for n in range(views.PER_SUBJECT):
            await app(client, "app_start", task=f"run {n}", mode="ask")
        refused = await client.call_tool("app_start", {"task": "one more", "mode": "ask"})
    assert error_of(refused) == (
        f"{views.PER_SUBJECT} of your runs started from views are running already; wait for one to end"
    )


async def test_a_pending_questions_arguments_are_redacted(llm: FakeLLM, tmp_path: Path) -> None:
    secret = "sk-live-" + "q" * 40
    settings = Settings(model="openai:fake-model", conversations_db=tmp_path / "s.sqlite3")
    server = build_server(settings, {"f": fault_entry()}, openai_env(llm, OPENAI_API_KEY=secret))
    llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": f"/tmp/{secret}"})))
    llm.reply(openai_reply("finished"))
    async with Client(server, extensions=UI) as client, anyio.create_task_group() as tg:

        async def call() -> None:
            with call_ids(client, "secret-1"):
                await client.call_tool("agent", {"task": "delete it"})

        tg.start_soon(call)
        run_id, question = await pending_of(client, "secret-1")
        await app(client, "app_answer", run_id=run_id, key=question["key"], decision="deny")
    assert secret not in str(question["arguments"]) and question["arguments"]["path"].startswith("/tmp/")


async def test_what_views_kept_of_runs_ended_long_ago_is_forgotten(llm: FakeLLM, tmp_path: Path) -> None:
    settings = Settings(model="openai:fake-model", conversations_db=tmp_path / "s.sqlite3")
    server = build_server(settings, {}, openai_env(llm))
    llm.reply(openai_reply("hi"))
    async with Client(server, extensions=UI) as client:
        run_id = (await client.call_tool("ask", {"prompt": "hi"})).structured_content["run_id"]  # type: ignore[index]
        kept = await app(client, "app_run", run_id=run_id)
        assert server.engine is not None
        assert await server.engine.runs.forget_ended(1) == (0, 0)  # ended just now: kept
        assert await server.engine.runs.forget_ended(-1) == (len(kept["events"]), 0)  # "ended before tomorrow": all
        forgotten = await app(client, "app_run", run_id=run_id)
    assert kept["events"] and forgotten["events"] == [] and forgotten["run"]["status"] == "done"
