"""MCP tasks against hostile callers (README, Tasks): odd ids, ttls and answers, concurrent readers, a caller that
cannot be asked, a database that fails, a model whose text no UTF-8 encodes. In memory, the SDK's real client speaking
raw JSON-RPC, as tests/front/test_tasks.py does, or over HTTP to our app served in this process where what is tested is
what goes on the wire; the children are our fault server."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import mcp.types as t
import pytest
from conftest import fault_entry, openai_env, serving_asgi
from fake_llm import FakeLLM, openai_reply
from mcp import Client
from task_hosts import LEGACY, MODERN, Era, caller, messages
from test_tasks import Raw, User, connected, deleting, start, status

from meta_agent.config.settings import Settings
from meta_agent.front.http.app import http_app
from meta_agent.front.server import build_server

pytestmark = [pytest.mark.anyio, pytest.mark.processes]


APPROVE = {"action": "accept", "content": {"decision": "allow_once"}}


async def answer_first_question(raw: Raw, task_id: str) -> None:
    """Allow the task's pending approval, in the task's era."""
    asking = await status(raw, task_id, "input_required")
    if raw.modern:
        [key] = asking["inputRequests"]
        await raw("tasks/update", {"taskId": task_id, "inputResponses": {key: APPROVE}})


@pytest.mark.parametrize("era", ["2025-11-25", "2026-07-28"])
async def test_a_task_that_outlives_its_ttl_still_gives_its_result(era: str, llm: FakeLLM, tmp_path: Path) -> None:
    """A task is kept while it runs; the caller must still be able to read its result once it ends, even when the run
    took longer than the ttl it asked for (the TypeScript client asks 60 s; agent runs take minutes)."""
    deleting(llm)
    store = tmp_path / "state.sqlite3"
    async with connected(llm, era, conversations_db=store) as raw:
        task_id = await start(raw, "delete /tmp/a", ttl=60_000)
        await status(raw, task_id, "input_required")
        with sqlite3.connect(store) as db:  # the run has taken two hours so far
            db.execute("update tasks set created_at = created_at - 7200 where id = ?", (task_id,))
        if raw.modern:
            await answer_first_question(raw, task_id)
            done = await status(raw, task_id, "completed")
            result = done["result"]
        else:  # tasks/result asks the user (User allows), then waits for the end
            result = await raw("tasks/result", {"taskId": task_id})
    assert result["content"] == [{"type": "text", "text": "finished"}]


async def test_2025_two_readers_of_one_task_ask_its_question_once(llm: FakeLLM) -> None:
    """Two `tasks/result` calls for one task (a host that retried, or two windows): the user is asked once."""
    deleting(llm)
    user = User()
    async with connected(llm, "2025-11-25", user) as raw:
        task_id = await start(raw, "delete /tmp/a")
        await status(raw, task_id, "input_required")
        results: list[dict[str, Any]] = []

        async def read() -> None:
            results.append(await raw("tasks/result", {"taskId": task_id}))

        async with anyio.create_task_group() as readers:
            readers.start_soon(read)
            readers.start_soon(read)
    assert [result["content"] for result in results] == [[{"type": "text", "text": "finished"}]] * 2
    assert len(user.asked) == 1


async def test_2025_a_child_question_on_a_caller_that_cannot_be_asked_does_not_hold_the_result(llm: FakeLLM) -> None:
    """A 2025-11-25 caller without the elicitation capability: a child's question is declined (as on a live call),
    and `tasks/result` gives the run's answer instead of waiting for the question to time out."""
    llm.reply(openai_reply(None, ("c1", "f__confirm", {})))
    llm.reply(openai_reply("asked"))
    server = build_server(Settings(model="openai:fake-model"), {"f": fault_entry()}, openai_env(llm))
    async with Client(server, mode="legacy") as client:
        raw = Raw(client, modern=False)
        task_id = await start(raw, "confirm")
        result = await raw("tasks/result", {"taskId": task_id})  # within BOUND
    assert result["content"] == [{"type": "text", "text": "asked"}]
    assert "no answer" in str(llm.requests[-1].body["messages"][-1]["content"])


async def test_2025_a_question_the_caller_fails_to_answer_does_not_hold_the_result(llm: FakeLLM) -> None:
    """The caller's elicitation handler fails (answers an error): the approval is refused, as on a live call, and
    `tasks/result` returns the run's answer rather than waiting out the question's ten minutes."""
    deleting(llm, "not allowed, then")

    async def failing(context: Any, params: t.ElicitRequestParams) -> t.ElicitResult | t.ErrorData:
        return t.ErrorData(code=t.INTERNAL_ERROR, message="the dialog crashed")

    server = build_server(Settings(model="openai:fake-model"), {"f": fault_entry()}, openai_env(llm))
    async with Client(server, mode="legacy", elicitation_callback=failing) as client:
        raw = Raw(client, modern=False)
        task_id = await start(raw, "delete /tmp/a")
        await status(raw, task_id, "input_required")
        result = await raw("tasks/result", {"taskId": task_id})  # within BOUND
    assert result["content"] == [{"type": "text", "text": "not allowed, then"}]


@pytest.mark.parametrize(
    "key", ["question-1", "-1", "approval-\u00b2", "approval-" + "9" * 5000], ids=["other", "nameless", "super", "huge"]
)
async def test_2026_an_answer_under_a_key_never_asked_is_ignored(key: str, llm: FakeLLM) -> None:
    """`tasks/update` with an answer under a key the task never asked (another question's name, no name, digits that
    are not ASCII, an absurd number) is acknowledged and ignored: the pending approval is still pending, and the
    right answer afterwards is the one the run gets."""
    deleting(llm)
    async with connected(llm, "2026-07-28") as raw:
        task_id = await start(raw, "delete /tmp/a")
        await status(raw, task_id, "input_required")
        await raw("tasks/update", {"taskId": task_id, "inputResponses": {key: APPROVE}})
        still = await raw("tasks/get", {"taskId": task_id})
        assert still["status"] == "input_required" and list(still["inputRequests"]) == ["approval-1"]
        await raw("tasks/update", {"taskId": task_id, "inputResponses": {"approval-1": APPROVE}})
        await status(raw, task_id, "completed")
    assert llm.requests[-1].body["messages"][-1]["content"] == "deleted /tmp/a"  # allowed, so it ran


async def test_a_task_whose_question_nobody_answers_fails_saying_why(
    llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task whose question is never answered is ended after the parked-run timeout: it reads `failed`, saying so,
    not `cancelled` (its caller cancelled nothing)."""
    monkeypatch.setattr("meta_agent.front.approvals.parked.PARK_TIMEOUT", 0.5)
    deleting(llm)
    async with connected(llm, "2026-07-28") as raw:
        task_id = await start(raw, "delete /tmp/a")
        ended = await status(raw, task_id, "completed", "failed", "cancelled")
    assert ended["status"] == "failed", ended


async def test_a_task_refused_before_its_run_began_stays_failed(llm: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task whose arguments were refused has no run in the run index; once its result is no longer held in memory
    (KEEP_RESULTS later tasks), it must still read as ended, not `working` until its ttl runs out."""
    monkeypatch.setattr("meta_agent.front.tasks.board.KEEP_RESULTS", 0)
    monkeypatch.setattr("meta_agent.front.tasks.board.START_GRACE", 0.0)
    async with connected(llm, "2025-11-25") as raw:
        created = await raw(
            "tools/call", {"name": "agent", "arguments": {"task": "x", "max_steps": "many"}, "task": {}}
        )
        ended = await status(raw, created["task"]["taskId"], "failed", "completed", "cancelled")
    assert ended["status"] == "failed"


@pytest.mark.parametrize("era", [LEGACY, MODERN])
async def test_a_models_unsafe_arguments_are_asked_about_safely(era: Era, llm: FakeLLM, tmp_path: Path) -> None:
    """A model's call whose argument holds a lone surrogate (JSON's "\\ud800", which no UTF-8 encodes), a terminal's
    escape and a bidirectional override (which would show the user other arguments than the call's): the task's
    question, its status message over HTTP, shows them made visible, and `tasks/get` answers."""
    body = openai_reply(None, ("c1", "f__delete_file", {"path": "a\ud800\x07\u202eb"}))
    llm.reply_raw(json.dumps(body).encode())  # ASCII escapes: the lone surrogate reaches the provider's SDK as is
    settings = Settings(model="openai:fake-model", conversations_db=tmp_path / "state.sqlite3")
    server = build_server(settings, {"f": fault_entry()}, openai_env(llm))
    async with (
        serving_asgi(lambda _url: http_app(server, host="127.0.0.1")) as url,
        caller(f"{url}/mcp", era) as host,
    ):
        task_id = await host.start("agent", "delete it")
        seen = await host.until(task_id, lambda read: read["status"] == "input_required")
        await host.result("tasks/cancel", {"taskId": task_id})
    shown = '{"path": "a\ufffd\\u0007<U+202E>b"}'  # JSON writes the bell as an escape already
    assert seen[-1]["statusMessage"] == f"meta-agent wants to run f.delete_file (destructive) with {shown}. Allow it?"


async def test_a_models_unsafe_thinking_is_reported_safely(llm: FakeLLM, tmp_path: Path) -> None:
    """The progress of a call over HTTP (what a task's status message says too) when the model's reasoning holds a
    lone surrogate and a bidirectional override: the progress shows them made visible, and the call is answered (a
    notification no UTF-8 encodes would have ended the call's stream before its answer)."""
    llm.reply_raw(json.dumps(openai_reply("done", reasoning="a\ud800\u202eb")).encode())  # ASCII escapes
    settings = Settings(model="openai:fake-model", conversations_db=tmp_path / "state.sqlite3")
    server = build_server(settings, {}, openai_env(llm))
    async with (
        serving_asgi(lambda _url: http_app(server, host="127.0.0.1")) as url,
        caller(f"{url}/mcp", LEGACY) as host,
    ):
        params = {"name": "agent", "arguments": {"task": "think"}, "_meta": {"progressToken": "p"}}
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
        response = await host.http.post(host.url, json=body, headers=host.in_session())
    sent = messages(response)
    progress = [m["params"]["message"] for m in sent if m.get("method") == "notifications/progress"]
    assert "step 1 · thinking: a\ufffd<U+202E>b" in progress
    assert sent[-1]["result"]["content"][0]["text"] == "done"


@pytest.mark.parametrize(
    "reply",
    [
        openai_reply("do\ud800ne"),  # its answer
        openai_reply(None, ("c1", "no\ud800such", {})),  # a call's name, sent back to it in the next turn
    ],
)
async def test_a_model_writing_a_lone_surrogate_still_gets_its_caller_an_answer(
    reply: dict[str, Any], llm: FakeLLM, tmp_path: Path
) -> None:
    """A model's lone surrogate (JSON's "\\ud800") in its answer or a tool call's name: the call over HTTP is
    answered, the surrogate a replacement character (no UTF-8 encodes it: the answer could not be written, and the
    next model turn, which sends the call back, could not be requested)."""
    llm.reply_raw(json.dumps(reply).encode())  # ASCII escapes: the lone surrogate reaches the provider's SDK as is
    llm.reply(openai_reply("do\ufffdne"))  # after the unknown tool's error
    settings = Settings(model="openai:fake-model", conversations_db=tmp_path / "state.sqlite3")
    server = build_server(settings, {}, openai_env(llm))
    async with (
        serving_asgi(lambda _url: http_app(server, host="127.0.0.1")) as url,
        caller(f"{url}/mcp", LEGACY) as host,
    ):
        answer = await host.result("tools/call", {"name": "agent", "arguments": {"task": "go"}})
    assert answer["content"][0]["text"] == "do\ufffdne"
