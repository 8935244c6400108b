"""A host that speaks raw JSON-RPC over HTTP to a replica's /mcp in either protocol era (2025-11-25: `initialize` and a
session; 2026-07-28: stateless requests declaring the tasks extension), for the tests of MCP tasks across replicas
and deploys: it starts a task, polls it, answers it and reads its result as a host would."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

import anyio
import httpx2

Era = Literal["2025-11-25", "2026-07-28"]
LEGACY: Era = "2025-11-25"
MODERN: Era = "2026-07-28"
EXTENSION = "io.modelcontextprotocol/tasks"
RELATED = "io.modelcontextprotocol/related-task"
CLIENT_INFO = {"name": "raw-task-host", "version": "1"}
HELLO = {"protocolVersion": LEGACY, "capabilities": {"elicitation": {"form": {}}}, "clientInfo": CLIENT_INFO}
ENVELOPE: dict[str, Any] = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}, "extensions": {EXTENSION: {}}},
}
BOUND = 60.0  # a loaded 2-core machine: a replica's start, a takeover (a third of a lease) and a model turn fit in it
TERMINAL = frozenset({"completed", "failed", "cancelled"})


@dataclass
class Caller:
    """A host speaking raw JSON-RPC to one replica's /mcp in one era, with its own Authorization header (if any)."""

    http: httpx2.AsyncClient
    url: str
    era: Era
    session: str | None = None
    ids: int = 0

    async def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """`method` asked as this era asks it over HTTP; the JSON-RPC answer (with `result` or `error`)."""
        self.ids += 1
        request_id = self.ids  # its own: calls of one caller may be made at once
        params = dict(params or {})
        headers: dict[str, str] = {"Mcp-Protocol-Version": self.era}
        if self.era == MODERN:
            params["_meta"] = ENVELOPE
            headers["Mcp-Method"] = method
            if (name := params.get("taskId", params.get("name", params.get("uri")))) is not None:
                headers["Mcp-Name"] = name
        elif self.session is not None:
            headers = self.in_session()
        body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        response = await self.http.post(self.url, json=body, headers=headers)
        # 2026-07-28 gives an error an HTTP status of its own too (-32602: 400)
        failed = self.era == MODERN and response.status_code in (400, 404, 500) and '"error"' in response.text
        assert response.status_code == 200 or failed, (method, response.status_code, response.text[:500])
        if method == "initialize":
            self.session = response.headers["mcp-session-id"]
        for message in messages(response):
            if message.get("id") == request_id and "method" not in message:
                return message
        raise AssertionError(f"no answer to {method}: {response.text[:500]}")

    def in_session(self) -> dict[str, str]:
        """The headers of a 2025-11-25 message in this caller's session."""
        return {"Mcp-Protocol-Version": LEGACY, "Mcp-Session-Id": self.session or ""}

    async def result(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        answer = await self.send(method, params)
        assert "result" in answer, (method, answer)
        return dict(answer["result"])

    async def error(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        answer = await self.send(method, params)
        assert "error" in answer, (method, answer)
        return dict(answer["error"])

    async def start(self, tool: str, task: str) -> str:
        """`tool` called as a task: its task id, once the call answered `working` at once."""
        params: dict[str, Any] = {"name": tool, "arguments": {"task": task}}
        if self.era == LEGACY:
            made = (await self.result("tools/call", {**params, "task": {"ttl": 600_000}}))["task"]
            assert made["ttl"] == 600_000, made
        else:
            made = await self.result("tools/call", params)
            assert made["resultType"] == "task", made
        assert made["status"] == "working", made
        return str(made["taskId"])

    async def task(self, task_id: str) -> dict[str, Any]:
        """`tasks/get`: the task as this era shows it."""
        return await self.result("tasks/get", {"taskId": task_id})

    async def until(self, task_id: str, done: Callable[[dict[str, Any]], bool], within: float = BOUND) -> Seen:
        """Poll `tasks/get` (as a host does) until `done` says so; every reading on the way."""
        seen = Seen()
        with anyio.fail_after(within):
            while not done(read := await self.task(task_id)):
                seen.append(read)
                await anyio.sleep(0.1)  # polling, as the task's pollInterval asks (shorter: the test waits)
        seen.append(read)
        return seen


class Seen(list[dict[str, Any]]):
    """The readings of one task, oldest first."""

    @property
    def statuses(self) -> list[str]:
        return [read["status"] for read in self]


def messages(response: httpx2.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a response: its JSON body, or the `data:` lines of its event stream."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        lines = (line.removeprefix("data:").strip() for line in response.text.splitlines())
        return [json.loads(line) for line in lines if line.startswith("{")]
    decoded = response.json()
    return decoded if isinstance(decoded, list) else [decoded]


@asynccontextmanager
async def caller(url: str, era: Era, authorization: str | None = None) -> AsyncIterator[Caller]:
    """A host of `era` on the replica at `url` (2025-11-25: with its session, made by `initialize`)."""
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if authorization is not None:
        headers["Authorization"] = authorization
    async with httpx2.AsyncClient(headers=headers, timeout=BOUND) as http:
        host = Caller(http, url, era)
        if era == LEGACY:
            made = await host.result("initialize", HELLO)
            assert made["protocolVersion"] == LEGACY and "tasks" in made["capabilities"], made
            note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert (await http.post(url, json=note, headers=host.in_session())).status_code == 202
        yield host


def answer_of(result: dict[str, Any]) -> str:
    """The answer of a run's CallToolResult (its structured content)."""
    assert not result.get("isError"), result
    return str(result["structuredContent"]["answer"])


def empty(result: dict[str, Any]) -> bool:
    """Whether a 2026-07-28 result is the empty one (`tasks/update`, `tasks/cancel`): nothing but its kind."""
    return result.get("resultType") == "complete" and not set(result) - {"resultType", "_meta"}


async def updated(host: Caller, task_id: str, responses: dict[str, Any]) -> None:
    """`tasks/update` with `responses`, acknowledged (whether the task takes them or not)."""
    assert empty(await host.result("tasks/update", {"taskId": task_id, "inputResponses": responses}))


async def wait_for(predicate: Callable[[], bool], within: float = BOUND) -> None:
    with anyio.fail_after(within):
        while not predicate():
            await anyio.sleep(0.05)  # polling a condition outside the server (a file, the fake model)
