"""MCP tasks in memory, both eras (README, Tasks): the SDK's real client against our real server, speaking the tasks
methods as raw JSON-RPC (the Python SDK's client has no tasks API); the children are our fault server. The
third-party clients are tests/front/test_tasks_clients.py's; replicas on PostgreSQL,
tests/front/test_tasks_replicas.py's."""

from __future__ import annotations

import base64
import json
import os
import socket
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as t
import pytest
from conftest import fault_entry, openai_env
from fake_llm import FakeLLM, openai_reply
from mcp import Client
from mcp.shared.exceptions import MCPError
from raw_stdio import RawHost, raw_serving

from meta_agent.config.settings import Settings
from meta_agent.front.http.app import http_app
from meta_agent.front.http.serve import serve_http
from meta_agent.front.server import build_server

pytestmark = [pytest.mark.anyio, pytest.mark.processes]

EXTENSION = "io.modelcontextprotocol/tasks"
RELATED = "io.modelcontextprotocol/related-task"
BOUND = 30.0  # seconds: generous for a loaded machine; a task's answer takes milliseconds
APPROVAL = 'meta-agent wants to run f.delete_file (destructive) with {"path": "/tmp/a"}. Allow it?'


def envelope(*, extension: bool = True) -> dict[str, Any]:
    """The `_meta` of a 2026-07-28 request, declaring the tasks extension (or not)."""
    capabilities: dict[str, Any] = {"elicitation": {"form": {}}}
    if extension:
        capabilities["extensions"] = {EXTENSION: {}}
    return {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    }


class Raw:
    """Raw JSON-RPC requests over a connected client (its session's dispatcher), in the client's era."""

    def __init__(self, client: Client, *, modern: bool) -> None:
        self._send = client.session._dispatcher.send_raw_request
        self.modern = modern

    async def __call__(self, method: str, params: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
        params = dict(params or {})
        if self.modern:
            params["_meta"] = envelope(**meta)
        with anyio.fail_after(BOUND):
            answer: dict[str, Any] = await self._send(method, params, None)
        return answer

    async def error(self, method: str, params: dict[str, Any] | None = None, **meta: Any) -> MCPError:
        with pytest.raises(MCPError) as caught:
            await self(method, params, **meta)
        return caught.value


class User:
    """The host's user: answers each elicitation with `decision`, and keeps what it was asked."""

    def __init__(self, decision: str = "allow_once") -> None:
        self.decision = decision
        self.asked: list[t.ElicitRequestParams] = []

    async def __call__(self, _ctx: Any, params: t.ElicitRequestParams) -> t.ElicitResult:
        self.asked.append(params)
        return t.ElicitResult(action="accept", content={"decision": self.decision})


@asynccontextmanager
async def connected(llm: FakeLLM, era: str, user: User | None = None, **settings: Any) -> AsyncIterator[Raw]:
    server = build_server(Settings(model="openai:fake-model", **settings), {"f": fault_entry()}, openai_env(llm))
    mode = "2026-07-28" if era == "2026-07-28" else "legacy"
    async with Client(server, mode=mode, elicitation_callback=user or User()) as client:
        yield Raw(client, modern=mode != "legacy")


async def start(raw: Raw, task: str, tool: str = "agent", ttl: int | None = None) -> str:
    """A new task of `tool`, its id."""
    params: dict[str, Any] = {"name": tool, "arguments": {"task": task}}
    if raw.modern:
        created = await raw("tools/call", params)
        assert created["resultType"] == "task", created
        return str(created["taskId"])
    params["task"] = {} if ttl is None else {"ttl": ttl}
    created = await raw("tools/call", params)
    return str(created["task"]["taskId"])


async def status(raw: Raw, task_id: str, *wanted: str) -> dict[str, Any]:
    """The task once its status is one of `wanted`, polled within BOUND."""
    with anyio.fail_after(BOUND):
        while (got := await raw("tasks/get", {"taskId": task_id}))["status"] not in wanted:
            await anyio.sleep(0.05)
    return got


def deleting(llm: FakeLLM, answer: str = "finished") -> None:
    """The model's turns: one call of f.delete_file (the user must allow it), then `answer`."""
    llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": "/tmp/a"})))
    llm.reply(openai_reply(answer))


async def test_2025_declares_tasks_and_which_tools_take_them(llm: FakeLLM) -> None:
    server = build_server(Settings(model="openai:fake-model"), {}, openai_env(llm))
    async with Client(server, mode="legacy") as client:
        caps = client.server_capabilities
        assert caps is not None and caps.model_dump(by_alias=True, exclude_none=True)["tasks"] == {
            "list": {},
            "cancel": {},
            "requests": {"tools": {"call": {}}},
        }
        tools = {tool.name: tool.execution for tool in (await client.list_tools()).tools}
    assert tools["agent"] == tools["plan"] == t.ToolExecution(task_support="optional")
    assert tools["ask"] is None  # absent: forbidden


async def test_2025_a_task_asks_on_its_result_stream_and_ends_with_the_runs_answer(llm: FakeLLM) -> None:
    deleting(llm)
    user = User()
    async with connected(llm, "2025-11-25", user) as raw:
        task_id = await start(raw, "delete /tmp/a", ttl=120_000)
        asking = await status(raw, task_id, "input_required")
        assert asking["statusMessage"] == APPROVAL and asking["ttl"] == 120_000 and asking["pollInterval"] == 1000
        result = await raw("tasks/result", {"taskId": task_id})
        done = await raw("tasks/get", {"taskId": task_id})
    assert [params.message for params in user.asked] == [APPROVAL]
    assert user.asked[0].meta is not None and user.asked[0].meta[RELATED] == {"taskId": task_id}  # type: ignore[index]
    assert result["content"] == [{"type": "text", "text": "finished"}]
    assert result["structuredContent"]["run_id"] == task_id  # the task's id is its run's
    assert result["_meta"][RELATED] == {"taskId": task_id}
    assert done["status"] == "completed"
    assert llm.requests[-1].body["messages"][-1]["content"] == "deleted /tmp/a"  # allowed, so it ran


async def test_2026_a_task_asks_through_tasks_get_and_takes_the_answer_once(llm: FakeLLM) -> None:
    deleting(llm)
    async with connected(llm, "2026-07-28") as raw:
        task_id = await start(raw, "delete /tmp/a")
        asking = await status(raw, task_id, "input_required")
        [(key, request)] = asking["inputRequests"].items()
        assert request["method"] == "elicitation/create" and request["params"]["message"] == APPROVAL
        answer = {key: {"action": "accept", "content": {"decision": "allow_once"}}}
        ack = await raw("tasks/update", {"taskId": task_id, "inputResponses": answer})
        assert ack["resultType"] == "complete" and set(ack) <= {"resultType", "_meta"}
        done = await status(raw, task_id, "completed")
        # the same answer again (a replay) is ignored: the question is no longer pending
        await raw("tasks/update", {"taskId": task_id, "inputResponses": answer})
        again = await raw("tasks/get", {"taskId": task_id})
    assert done["result"]["content"] == [{"type": "text", "text": "finished"}]
    assert done["result"]["structuredContent"]["run_id"] == task_id
    assert "inputRequests" not in done and again["status"] == "completed"
    assert sum(1 for seen in llm.requests if "deleted /tmp/a" in str(seen.body)) == 1


async def test_2026_only_a_request_that_declares_the_extension_gets_a_task(llm: FakeLLM) -> None:
    llm.reply(openai_reply("answered inline"))
    async with connected(llm, "2026-07-28") as raw:
        inline = await raw("tools/call", {"name": "agent", "arguments": {"task": "hi"}}, extension=False)
        refused = await raw.error("tasks/get", {"taskId": "01M8FJX02CV2A6AC6N5PFF1J3F"}, extension=False)
        no_result = await raw.error("tasks/result", {"taskId": "01M8FJX02CV2A6AC6N5PFF1J3F"})
        no_list = await raw.error("tasks/list")
    assert inline["resultType"] == "complete" and inline["content"][0]["text"] == "answered inline"
    assert refused.code == -32021 and EXTENSION in refused.message
    assert no_result.code == no_list.code == t.METHOD_NOT_FOUND


@pytest.mark.parametrize("era", ["2025-11-25", "2026-07-28"])
async def test_a_cancelled_task_stays_cancelled_and_its_run_stops(era: str, llm: FakeLLM) -> None:
    llm.reply(openai_reply("too late"), delay=60)  # the model answers only once the request is given up
    async with connected(llm, era) as raw:
        task_id = await start(raw, "wait")
        with anyio.fail_after(BOUND):
            while not llm.requests:
                await anyio.sleep(0.05)
        cancelled = await raw("tasks/cancel", {"taskId": task_id})
        read = await status(raw, task_id, "cancelled")
        if era == "2025-11-25":
            assert cancelled["status"] == "cancelled" and cancelled["taskId"] == task_id
            again = await raw.error("tasks/cancel", {"taskId": task_id})
            assert again.code == t.INVALID_PARAMS and "has ended already (cancelled)" in again.message
            no_result = await raw.error("tasks/result", {"taskId": task_id})
            assert no_result.code == t.INVALID_PARAMS
        else:
            assert cancelled["resultType"] == "complete" and set(cancelled) <= {"resultType", "_meta"}
    assert read["status"] == "cancelled"
    assert len(llm.requests) == 1  # the run stopped: no second attempt, no further turn


@pytest.mark.parametrize("era", ["2025-11-25", "2026-07-28"])
async def test_another_callers_task_is_an_unknown_task(era: str, llm: FakeLLM) -> None:
    """Two connections (each its own lifespan, owner and task board) on one database: neither sees the other's
    task, and a forged id gets the same error."""
    llm.reply(openai_reply("mine"))
    async with connected(llm, era) as mine:
        task_id = await start(mine, "mine")
        await status(mine, task_id, "completed")
        async with connected(llm, era) as theirs:
            errors = [
                await theirs.error("tasks/get", {"taskId": task_id}),
                await theirs.error("tasks/cancel", {"taskId": task_id}),
                await theirs.error("tasks/get", {"taskId": "0" * 26}),
                await theirs.error("tasks/get", {"taskId": "é" * 10_000}),
            ]
            if era == "2025-11-25":
                errors.append(await theirs.error("tasks/result", {"taskId": task_id}))
                listed = await theirs("tasks/list")
                assert listed == {"tasks": []}
            else:
                errors.append(await theirs.error("tasks/update", {"taskId": task_id, "inputResponses": {}}))
        assert (await status(mine, task_id, "completed"))["status"] == "completed"
    assert {error.code for error in errors} == {t.INVALID_PARAMS}
    messages = [error.message for error in errors]
    assert messages[0] == messages[1] == f"unknown task {task_id!r}" and len(messages[3]) < 80


async def test_2025_a_tool_that_cannot_be_a_task_says_so(llm: FakeLLM) -> None:
    async with connected(llm, "2025-11-25") as raw:
        refused = await raw.error("tools/call", {"name": "ask", "arguments": {"prompt": "hi"}, "task": {}})
    assert (
        refused.code == t.METHOD_NOT_FOUND and refused.message == "ask does not run as a task: call it without `task`"
    )
    assert llm.requests == []


@pytest.mark.parametrize(("asked", "kept"), [(None, 3_600_000), (0, 60_000), (10**12, 3_600_000), (90_000, 90_000)])
async def test_a_tasks_time_is_its_callers_within_bounds(asked: int | None, kept: int, llm: FakeLLM) -> None:
    llm.reply(openai_reply("ok"))
    async with connected(llm, "2025-11-25") as raw:
        task_id = await start(raw, "ok", ttl=asked)
        done = await status(raw, task_id, "completed")
    assert done["ttl"] == kept


async def test_a_task_past_its_time_is_gone(llm: FakeLLM, tmp_path: Path) -> None:
    llm.reply(openai_reply("ok"))
    store = tmp_path / "state.sqlite3"
    async with connected(llm, "2025-11-25", conversations_db=store) as raw:
        task_id = await start(raw, "ok")
        await status(raw, task_id, "completed")
        with sqlite3.connect(store) as db:  # as if it had been made, and had ended, two hours ago
            db.execute("update tasks set created_at = created_at - 7200 where id = ?", (task_id,))
            db.execute("update runs set updated = datetime(updated, '-7200 seconds') where id = ?", (task_id,))
        gone = await raw.error("tasks/get", {"taskId": task_id})
        listed = await raw("tasks/list")
    assert gone.code == t.INVALID_PARAMS and listed == {"tasks": []}


async def test_tasks_past_the_limit_are_refused_in_one_line(llm: FakeLLM) -> None:
    llm.reply(openai_reply("slow"), delay=60)
    async with connected(llm, "2025-11-25", max_tasks=1) as raw:
        first = await start(raw, "slow")
        refused = await raw.error("tools/call", {"name": "agent", "arguments": {"task": "more"}, "task": {}})
        await raw("tasks/cancel", {"taskId": first})
    assert refused.code == t.INTERNAL_ERROR
    assert refused.message == "1 tasks already run (META_AGENT_MAX_TASKS); wait for one to end, or cancel one"


async def test_2025_a_task_whose_arguments_are_refused_fails_with_the_one_line(llm: FakeLLM) -> None:
    async with connected(llm, "2025-11-25") as raw:
        created = await raw(
            "tools/call", {"name": "agent", "arguments": {"task": "x", "max_steps": "many"}, "task": {}}
        )
        task_id = created["task"]["taskId"]
        failed = await status(raw, task_id, "failed")
        result = await raw("tasks/result", {"taskId": task_id})
    assert failed["statusMessage"] == result["content"][0]["text"]
    assert "max_steps" in failed["statusMessage"] and "\n" not in failed["statusMessage"]
    assert result["isError"] is True and llm.requests == []


async def test_2025_a_tasks_progress_goes_on_the_token_of_its_call_after_it_answered(
    llm: FakeLLM, tmp_path: Path
) -> None:
    """Over stdio (a process, raw lines): the call answers at once with the task, and the run's progress follows on
    the call's progress token, each marked with the task, until the task's result."""
    llm.reply(openai_reply("the answer"), delay=0.5)
    environ = {**os.environ, **openai_env(llm, model="openai:fake-model")}
    async with raw_serving(tmp_path, "2025-11-25", environ) as host:
        await host.handshake()
        params = {"name": "agent", "arguments": {"task": "go"}, "task": {}, "_meta": {"progressToken": "p1"}}
        created = await host.request("tools/call", params)
        task_id = created["result"]["task"]["taskId"]
        await host.write(
            json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tasks/result", "params": {"taskId": task_id}}).encode()
            + b"\n"
        )
        seen = await lines_until_answer(host, 7)
        assert host.process.stdin is not None
        await host.process.stdin.aclose()
        assert await host.exit_code() == 0
    progress = [message["params"] for message in seen if message.get("method") == "notifications/progress"]
    assert progress and {p["progressToken"] for p in progress} == {"p1"}
    assert all(p["_meta"][RELATED] == {"taskId": task_id} for p in progress)
    assert [p["progress"] for p in progress] == sorted({p["progress"] for p in progress})  # only goes up
    assert progress[-1]["message"] == "done · final (1 model call, 0 tool calls)"
    assert seen[-1]["result"]["content"] == [{"type": "text", "text": "the answer"}]


async def lines_until_answer(host: RawHost, request_id: int) -> list[dict[str, Any]]:
    """Every message the server writes until the answer to `request_id`, that answer last."""
    seen: list[dict[str, Any]] = []
    with anyio.fail_after(BOUND):
        while not seen or seen[-1].get("id") != request_id:
            seen.append(json.loads(await host.line()))
    return seen


@pytest.mark.parametrize(
    ("named", "code"),
    [("task", None), ("base64", None), ("other", -32020), ("other_base64", -32020), ("garbled", -32020)],
)
async def test_2026_mcp_name_where_given_must_name_the_task(named: str, code: int | None, llm: FakeLLM) -> None:
    """Over HTTP the `Mcp-Name` header of a `tasks/*` request, where a client gives it, names its task: plain, or
    base64-wrapped as the spec wraps a value that is not plain ASCII; any other value is a header mismatch."""
    llm.reply(openai_reply("ok"))
    server = build_server(Settings(model="openai:fake-model"), {}, openai_env(llm))
    sock = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    headers = {
        "Accept": "application/json, text/event-stream",
        "Mcp-Protocol-Version": "2026-07-28",
        "Mcp-Name": "agent",
    }
    async with anyio.create_task_group() as tg, httpx2.AsyncClient(timeout=BOUND) as http:
        tg.start_soon(serve_http, http_app(server, host="127.0.0.1"), [sock])

        async def post(method: str, params: dict[str, Any], **extra: str) -> dict[str, Any]:
            body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": envelope()}}
            with anyio.fail_after(BOUND):
                while True:
                    try:
                        answer = await http.post(url, json=body, headers={**headers, "Mcp-Method": method, **extra})
                        break
                    except httpx2.ConnectError:  # not listening yet
                        await anyio.sleep(0.05)
            return dict(answer.json())

        created = await post("tools/call", {"name": "agent", "arguments": {"task": "ok"}})
        assert "result" in created, created
        task_id = created["result"]["taskId"]
        given = {
            "task": task_id,
            "base64": "=?base64?" + base64.b64encode(task_id.encode()).decode() + "?=",
            "other": "0" * 26,
            "other_base64": "=?base64?" + base64.b64encode(b"0" * 26).decode() + "?=",
            "garbled": "=?base64?%%%?=",
        }[named]
        read = await post("tasks/get", {"taskId": task_id}, **{"Mcp-Name": given})
        tg.cancel_scope.cancel()
    if code is None:
        assert read["result"]["taskId"] == task_id, read
    else:
        assert read["error"]["code"] == code and "Mcp-Name" in read["error"]["message"], read
