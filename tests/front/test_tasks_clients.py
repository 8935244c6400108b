"""`meta-agent serve` runs `agent` as an MCP task for the third-party clients that speak tasks, each in its own
process, over stdio and over streamable HTTP: the TypeScript SDK's experimental tasks client (2025-11-25, the core's
tasks: fixtures/ts_tasks_client.mjs) and FastMCP's client with fastmcp-tasks (2026-07-28, the extension
`io.modelcontextprotocol/tasks`: fixtures/fastmcp_tasks_client.py). In both, a task whose run needs the user's approval
(the fault child's f.delete_file) asks the client in that era's way and goes on with the answer, and a task whose
model request is slow is cancelled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from conftest import TESTS, ServerLog, fault_entry, http_serving, openai_env
from fake_llm import FakeLLM, openai_reply

pytestmark = [pytest.mark.anyio, pytest.mark.processes]

TS_CLIENT = TESTS / "fixtures" / "ts_tasks_client.mjs"
FASTMCP_CLIENT = TESTS / "fixtures" / "fastmcp_tasks_client.py"
TS_SDK = TESTS / "node_modules" / "@modelcontextprotocol" / "sdk"
TOKEN = "tasks-token"
RELATED = "io.modelcontextprotocol/related-task"
QUESTION = 'meta-agent wants to run f.delete_file (destructive) with {"path": "/tmp/a"}. Allow it?'
ALLOW = {"decision": "allow_once"}
BOUND = 60  # seconds a client's whole session may take


class Host:
    """A client script run as a process: the JSON events it prints, as they come, and its stdin."""

    def __init__(self, process: Process, errors: Path) -> None:
        self.process = process
        self.errors = errors
        self.events: list[dict[str, Any]] = []
        self._changed = anyio.Event()

    async def read(self) -> None:
        assert self.process.stdout is not None
        pending = b""
        async for chunk in self.process.stdout:
            pending += chunk
            *lines, pending = pending.split(b"\n")
            self.events.extend(json.loads(line) for line in lines if line.strip())
            self._changed.set()
            self._changed = anyio.Event()

    def named(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == event]

    def one(self, event: str) -> dict[str, Any]:
        found = self.named(event)
        assert len(found) == 1, f"{len(found)} {event!r} events: {self.transcript()}"
        return found[0]

    async def until(self, event: str) -> dict[str, Any]:
        with anyio.move_on_after(BOUND):
            while not self.named(event):
                if self.process.returncode is not None:
                    raise AssertionError(f"the client ended before {event!r}: {self.transcript()}")
                await self._changed.wait()
            return self.named(event)[0]
        raise AssertionError(f"no {event!r} within {BOUND} s: {self.transcript()}")

    async def say(self, line: str) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(line.encode() + b"\n")

    async def ended(self) -> int:
        with anyio.move_on_after(BOUND):
            return await self.process.wait()
        raise AssertionError(f"the client did not end within {BOUND} s: {self.transcript()}")

    def transcript(self) -> str:
        tail = self.errors.read_text(errors="replace")[-3000:]
        return "\n".join(json.dumps(e)[:600] for e in self.events) + f"\n-- stderr (tail):\n{tail}"


@asynccontextmanager
async def hosting(command: list[str], env: Mapping[str, str], errors: Path) -> AsyncIterator[Host]:
    """Run a client script; its stderr (and a stdio server's, which it passes on) goes to `errors`."""
    with errors.open("w") as sink:
        process = await anyio.open_process(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=sink, env=dict(env)
        )
        async with process, anyio.create_task_group() as tg:
            host = Host(process, errors)
            tg.start_soon(host.read)
            try:
                yield host
            finally:
                if process.returncode is None:
                    process.kill()


async def run_stopped(run_id: str) -> str:
    """How the run ended, from its trace (`<META_AGENT_TRACE_DIR>/<run id>.jsonl`, whole once it has ended)."""
    path = Path(os.environ["META_AGENT_TRACE_DIR"]) / f"{run_id}.jsonl"
    with anyio.fail_after(BOUND):
        while True:
            lines = path.read_text().splitlines() if path.exists() else []
            ends = [json.loads(line) for line in lines if '"run_finished"' in line]
            if ends:
                return str(ends[-1]["result"]["stop_reason"])
            await anyio.sleep(0.05)


async def model_asked(llm: FakeLLM, text: str) -> None:
    """Wait for the fake model to have been sent `text` (its reply may be held)."""
    with anyio.fail_after(BOUND):
        while not any(text in json.dumps(request.body) for request in llm.requests):
            await anyio.sleep(0.05)


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tasks") / "servers.json"
    fault = fault_entry()
    path.write_text(json.dumps({"mcpServers": {"f": {"command": fault.command, "args": list(fault.args)}}}))
    return path


@pytest.fixture(scope="module")
def http_server(llm_endpoint: FakeLLM, config: Path) -> Iterator[tuple[str, ServerLog]]:
    environ = openai_env(llm_endpoint, model="openai:fake-model", base=os.environ, META_AGENT_HTTP_TOKEN=TOKEN)
    with http_serving(config, environ) as served:
        yield served


def target(transport: str, request: pytest.FixtureRequest, config: Path, *, token_flag: str) -> list[str]:
    """The client's arguments naming the server: `meta-agent serve` to start on stdio, or the HTTP server's URL."""
    if transport == "stdio":
        return ["--stdio", json.dumps([sys.executable, "-m", "meta_agent", "serve", "--config", str(config)])]
    url, _ = request.getfixturevalue("http_server")
    credentials = ["--header", f"Authorization: Bearer {TOKEN}"] if token_flag == "header" else ["--token", TOKEN]
    return ["--url", f"{url}/mcp", *credentials]


def approval_replies(llm: FakeLLM) -> None:
    llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": "/tmp/a"})))
    llm.reply(openai_reply("finished"))


def approved_and_ran(llm: FakeLLM) -> None:
    """The answer reached the run: the tool ran, and the model was told so."""
    assert llm.requests[-1].body["messages"][-1]["content"] == "deleted /tmp/a"


# -- the TypeScript SDK's tasks client (2025-11-25) ------------------------------------------------------------------


def ts_command(transport: str, request: pytest.FixtureRequest, config: Path, *more: str) -> list[str]:
    assert TS_SDK.exists(), "the TypeScript SDK is not installed; run the README's test command"
    where = target(transport, request, config, token_flag="header")
    return ["node", str(TS_CLIENT), *where, "--tool", "agent", "--ttl", "60000", *more]


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_typescript_client_answers_an_approval_on_tasks_result(
    transport: str, request: pytest.FixtureRequest, config: Path, llm: FakeLLM, tmp_path: Path
) -> None:
    """callToolStream: the task goes input_required, the approval arrives as elicitation/create (with the related-task
    _meta) while tasks/result waits, the answer resumes the run, and tasks/result gives the run's answer."""
    approval_replies(llm)
    command = ts_command(transport, request, config, "--args", '{"task": "delete /tmp/a"}')
    command += ["--content", json.dumps(ALLOW)]
    env = openai_env(llm, model="openai:fake-model", base=os.environ)
    async with hosting(command, env, tmp_path / "client.err") as host:
        code = await host.ended()
    assert code == 0, host.transcript()
    assert host.one("connected")["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    assert host.one("tool")["execution"] == {"taskSupport": "optional"}
    created = host.one("taskCreated")["task"]
    task_id = created["taskId"]
    assert created["status"] == "working" and created["ttl"] > 0 and created["pollInterval"] > 0
    # the SDK's loop saw the task wait for input, then asked tasks/result, on whose stream the question came
    kinds = [e["event"] for e in host.events if e["event"] != "progress"]
    statuses = [e["task"]["status"] for e in host.named("taskStatus")]
    assert statuses[-1] == "input_required" and set(statuses) <= {"working", "input_required"}, statuses
    assert host.named("taskStatus")[-1]["task"]["statusMessage"] == QUESTION
    elicitation = host.one("elicitation")["params"]
    assert elicitation["message"] == QUESTION
    assert elicitation["_meta"][RELATED] == {"taskId": task_id}
    assert elicitation["requestedSchema"]["properties"]["decision"]["enum"] == ["allow_once", "allow_session", "deny"]
    assert kinds.index("elicitation") > kinds.index("taskStatus") and kinds[-2:] == ["result", "list"], kinds
    result = host.one("result")["result"]
    assert result["_meta"][RELATED] == {"taskId": task_id}
    assert result["content"] == [{"type": "text", "text": "finished"}] and not result.get("isError")
    assert result["structuredContent"]["run_id"] == task_id  # a task is its run
    assert result["structuredContent"]["steps"][0]["tool_calls"][0]["ok"] is True
    approved_and_ran(llm)
    # the run's progress went to the call's progress token, related to the task
    progress = [e["progress"] for e in host.named("progress")]
    assert progress and all(p["_meta"][RELATED] == {"taskId": task_id} for p in progress)
    listed = {task["taskId"]: task["status"] for task in host.one("list")["result"]["tasks"]}
    assert listed[task_id] == "completed"


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_typescript_client_cancels_a_task_and_lists_it(
    transport: str, request: pytest.FixtureRequest, config: Path, llm: FakeLLM, tmp_path: Path
) -> None:
    """A task whose model request is held is cancelled: tasks/cancel answers the task `cancelled`, tasks/get reads
    `cancelled`, a second tasks/cancel is -32602, tasks/result is an error, and tasks/list lists it cancelled."""
    llm.reply(openai_reply("too late"), delay=BOUND)
    command = ts_command(transport, request, config, "--args", '{"task": "wait for the model"}', "--scenario", "cancel")
    env = openai_env(llm, model="openai:fake-model", base=os.environ)
    async with hosting(command, env, tmp_path / "client.err") as host:
        task_id = (await host.until("taskCreated"))["task"]["taskId"]
        await model_asked(llm, "wait for the model")  # the run is under way, waiting for the model
        await host.say("cancel")
        code = await host.ended()
    assert code == 0, host.transcript()
    assert host.one("taskCreated")["task"]["status"] == "working"
    cancelled = host.one("cancelled")["task"]
    assert (cancelled["taskId"], cancelled["status"]) == (task_id, "cancelled")
    assert host.one("afterCancel")["task"]["status"] == "cancelled"
    assert host.one("secondCancelRefused")["code"] == -32602
    assert host.one("resultRefused")["code"] in (-32602, -32603), host.transcript()
    assert not host.named("result") and not host.named("error")
    listed = {task["taskId"]: task["status"] for task in host.one("list")["result"]["tasks"]}
    assert listed[task_id] == "cancelled"
    assert await run_stopped(task_id) == "cancelled"  # the run itself was stopped, in its model call


# -- FastMCP's client with fastmcp-tasks (2026-07-28) ----------------------------------------------------------------


def fastmcp_command(transport: str, request: pytest.FixtureRequest, config: Path, *more: str) -> list[str]:
    where = target(transport, request, config, token_flag="token")
    return [sys.executable, str(FASTMCP_CLIENT), *where, "--tool", "agent", *more]


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_fastmcp_client_resolves_a_task_answering_its_approval(
    transport: str, request: pytest.FixtureRequest, config: Path, llm: FakeLLM, tmp_path: Path
) -> None:
    """A plain call_tool becomes a task (the extension declared); fastmcp-tasks polls tasks/get, puts the approval in
    its inputRequests to the elicitation handler, sends the answer with tasks/update under the question's key, and
    gets the run's answer inline once the task is completed."""
    approval_replies(llm)
    command = fastmcp_command(transport, request, config, "--args", '{"task": "delete /tmp/a"}')
    command += ["--content", json.dumps(ALLOW)]
    env = openai_env(llm, model="openai:fake-model", base=os.environ)
    async with hosting(command, env, tmp_path / "client.err") as host:
        code = await host.ended()
    assert code == 0, host.transcript()
    assert host.one("connected")["protocol"] == "2026-07-28"
    polls = host.named("tasks/get")
    task_id = polls[0]["task_id"]
    assert {p["task_id"] for p in polls} == {task_id}
    asking = [p["result"] for p in polls if p["result"]["status"] == "input_required"]
    assert asking, host.transcript()
    (key, question), *others = asking[0]["inputRequests"].items()
    assert not others and question["method"] == "elicitation/create"
    assert question["params"]["message"] == QUESTION
    assert host.one("elicitation")["message"] == QUESTION
    update = host.one("tasks/update")
    assert update["task_id"] == task_id
    assert update["input_responses"] == {key: {"action": "accept", "content": ALLOW}}
    final = polls[-1]["result"]
    assert final["status"] == "completed" and final["resultType"] == "complete"
    assert final["result"]["content"] == [{"type": "text", "text": "finished"}]
    result = host.one("result")
    assert (result["text"], result["is_error"]) == ("finished", False)
    assert result["structured"]["run_id"] == task_id  # a task is its run
    approved_and_ran(llm)


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_fastmcp_client_cancels_a_task(
    transport: str, request: pytest.FixtureRequest, config: Path, llm: FakeLLM, tmp_path: Path
) -> None:
    """call_tool_task gets a task at once (`resultType: "task"`); its handle's cancel() (tasks/cancel) while the run
    waits for the model leaves the task `cancelled`, and its result() says it was cancelled."""
    llm.reply(openai_reply("too late"), delay=BOUND)
    more = ("--args", '{"task": "wait for the model"}', "--scenario", "cancel")
    command = fastmcp_command(transport, request, config, *more)
    env = openai_env(llm, model="openai:fake-model", base=os.environ)
    async with hosting(command, env, tmp_path / "client.err") as host:
        created = (await host.until("taskCreated"))["task"]
        await model_asked(llm, "wait for the model")
        await host.say("cancel")
        code = await host.ended()
    assert code == 0, host.transcript()
    assert (created["resultType"], created["status"]) == ("task", "working")
    assert host.one("tasks/cancel")["task_id"] == created["taskId"]
    assert host.one("settled")["status"] == "cancelled"
    assert host.one("resultRefused")["message"] == f"Task {created['taskId']} was cancelled"
    assert await run_stopped(created["taskId"]) == "cancelled"
