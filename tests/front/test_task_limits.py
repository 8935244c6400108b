"""META_AGENT_MAX_TASKS under concurrency (issue 47): bursts of task-augmented calls made at once, in both eras, in
memory (the SDK's real client speaking raw JSON-RPC, as tests/front/test_tasks.py does) and over HTTP to our app served
in this process, against a server with no child. Exactly the limit start and the rest get the one line; nothing leaks: the places come back when tasks end or
are cancelled, when a task cannot be recorded, and when its caller goes away before the call answered. Replicas on
PostgreSQL, each with its own limit, are tests/front/test_limits_replicas.py's."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from conftest import openai_env, serving_asgi
from fake_llm import FakeLLM, openai_reply
from mcp import Client
from mcp.shared.exceptions import MCPError
from task_hosts import LEGACY, MODERN, Caller, Era, caller
from test_tasks import BOUND, Raw, start, status

from meta_agent.config.settings import Settings
from meta_agent.front.http.app import http_app
from meta_agent.front.server import build_server

pytestmark = [pytest.mark.anyio, pytest.mark.quick]

LIMIT = 5
REFUSED = f"{LIMIT} tasks already run (META_AGENT_MAX_TASKS); wait for one to end, or cancel one"
ERAS = ["2025-11-25", "2026-07-28"]


@asynccontextmanager
async def connected(llm: FakeLLM, era: str, store: Path) -> AsyncIterator[Raw]:
    settings = Settings(model="openai:fake-model", conversations_db=store, max_tasks=LIMIT)
    server = build_server(settings, {}, openai_env(llm))
    mode = "2026-07-28" if era == "2026-07-28" else "legacy"
    async with Client(server, mode=mode) as client:
        raw = Raw(client, modern=mode != "legacy")
        await raw.error("tasks/get", {"taskId": "0" * 26})  # an unknown task: its read makes the database
        yield raw


@contextmanager
def held(llm: FakeLLM, count: int) -> Iterator[threading.Event]:
    """`count` model replies, each held until the gate given is set (set, whatever happens, when the block ends)."""
    gate = threading.Event()
    for _ in range(count):
        llm.reply(openai_reply("done"), gate=gate)
    try:
        yield gate
    finally:
        gate.set()


@dataclass
class Burst:
    made: list[str] = field(default_factory=list)  # task ids
    refused: list[str] = field(default_factory=list)  # the errors' messages


async def burst(raw: Raw, count: int, into: Burst | None = None) -> Burst:
    """`count` calls of `agent` as tasks, all at once."""
    seen = into or Burst()

    async def one(n: int) -> None:
        try:
            seen.made.append(await start(raw, f"burst {n}"))
        except MCPError as exc:
            seen.refused.append(exc.error.message)

    async with anyio.create_task_group() as calls:
        for n in range(count):
            calls.start_soon(one, n)
    return seen


async def admitted(raw: Raw, count: int) -> list[str]:
    """`count` tasks started one after another, each as soon as a place is free: a refused call is made again."""
    made: list[str] = []
    with anyio.fail_after(BOUND):
        while len(made) < count:
            try:
                made.append(await start(raw, "again"))
            except MCPError as exc:
                assert exc.error.message == REFUSED
                await anyio.sleep(0.05)  # polling for the place, as a refused host would
    return made


async def wait_for(predicate: Callable[[], bool], within: float = BOUND) -> None:
    with anyio.fail_after(within):
        while not predicate():
            await anyio.sleep(0.05)  # polling the fake model's requests, on its own thread


def count(store: Path, table: str) -> int:
    with sqlite3.connect(store) as db:
        return int(db.execute(f"select count(*) from {table}").fetchone()[0])


@pytest.mark.parametrize("era", ERAS)
async def test_a_burst_of_1000_starts_exactly_the_limit_and_the_places_come_back(
    era: str, llm: FakeLLM, tmp_path: Path
) -> None:
    """1,000 calls at once: 5 tasks, 995 one-line refusals, 5 runs at their model turn and no more. Once those 5 end,
    a burst of 100 starts 5 again; once those are cancelled, 5 more start one by one, and the next is refused."""
    store = tmp_path / "state.sqlite3"
    with held(llm, LIMIT) as first_gate, held(llm, LIMIT), held(llm, LIMIT):
        async with connected(llm, era, store) as raw:
            first = await burst(raw, 1000)
            assert len(first.made) == LIMIT and first.refused == [REFUSED] * (1000 - LIMIT)
            await wait_for(lambda: len(llm.requests) == LIMIT)  # each task's run is at its model turn
            assert count(store, "tasks") == LIMIT

            first_gate.set()  # the five end
            for task_id in first.made:
                await status(raw, task_id, "completed")
            second = await burst(raw, 100)
            assert len(second.made) == LIMIT and second.refused == [REFUSED] * (100 - LIMIT)
            await wait_for(lambda: len(llm.requests) == 2 * LIMIT)

            for task_id in second.made:
                await raw("tasks/cancel", {"taskId": task_id})
            third = await admitted(raw, LIMIT)
            refused = await raw.error("tools/call", task_params(raw, "one more"))
            await wait_for(lambda: len(llm.requests) == 3 * LIMIT)
            for task_id in third:
                await raw("tasks/cancel", {"taskId": task_id})
    assert refused.message == REFUSED
    assert count(store, "tasks") == count(store, "runs") == 3 * LIMIT  # no refused call left a row or ran


async def test_a_task_that_cannot_be_recorded_gives_its_place_back(llm: FakeLLM, tmp_path: Path) -> None:
    """While the tasks table cannot be written, a burst of 100 is refused: the calls that tried to record their
    tasks say why, the others that the places were taken meanwhile. Then a burst of 100 starts exactly 5: none of the
    refused calls kept its place."""
    store = tmp_path / "state.sqlite3"
    with held(llm, LIMIT):
        async with connected(llm, "2026-07-28", store) as raw:
            with sqlite3.connect(store) as db:
                db.execute("alter table tasks rename to tasks_away")
            failing = await burst(raw, 100)
            with sqlite3.connect(store) as db:
                db.execute("alter table tasks_away rename to tasks")
            after = await burst(raw, 100)
            for task_id in after.made:
                await raw("tasks/cancel", {"taskId": task_id})
    unrecorded = f"cannot record the task in {store}: no such table: tasks"
    assert failing.made == [] and len(failing.refused) == 100  # a few at once fail to record, the rest wait no turn
    assert set(failing.refused) == {unrecorded, REFUSED} and failing.refused.count(unrecorded) >= LIMIT
    assert len(after.made) == LIMIT and after.refused == [REFUSED] * (100 - LIMIT)


@pytest.mark.parametrize("era", ERAS)
async def test_callers_gone_before_the_answer_give_their_places_back(era: str, llm: FakeLLM, tmp_path: Path) -> None:
    """1,000 calls at once while the database is held: 5 take the places and wait to record their tasks, 995 are
    refused at once. The 5 callers go away before their calls answer: no run starts for them, and 5 others start."""
    store = tmp_path / "state.sqlite3"
    with held(llm, LIMIT):
        async with connected(llm, era, store) as raw:
            gone = Burst()
            db = sqlite3.connect(store, isolation_level=None)
            try:
                db.execute("begin immediate")  # the server's writes wait for this (its connections, up to 10 s)
                async with anyio.create_task_group() as callers:
                    callers.start_soon(burst, raw, 1000, gone)
                    await wait_for(lambda: len(gone.refused) == 1000 - LIMIT)
                    callers.cancel_scope.cancel()  # the 5 waiting go away
                    if raw.modern:  # these callers unwind only once the writes they began end: commit first
                        db.execute("commit")
                if not raw.modern:
                    # A 2025-11-25 caller tells the server with a notification, sent as its call unwinds (the block
                    # above waited for that). The server applies them in the order they come, so once a request sent
                    # after them has its answer, they have reached it: only then may the writes they began end (else
                    # a write could end first, and the task of a caller gone would run).
                    await raw("tools/list")
                    db.execute("commit")
            finally:
                if db.in_transaction:
                    db.execute("commit")
                db.close()
            again = await admitted(raw, LIMIT)
            refused = await raw.error("tools/call", task_params(raw, "one more"))
            await wait_for(lambda: len(llm.requests) == LIMIT)
            for task_id in again:
                await raw("tasks/cancel", {"taskId": task_id})
    assert gone.made == [] and set(gone.refused) == {REFUSED} and refused.message == REFUSED
    assert count(store, "runs") == LIMIT  # the tasks of the callers gone never ran
    assert all("again" in str(seen.body) for seen in llm.requests)


@pytest.mark.parametrize("era", [LEGACY, MODERN])
async def test_http_callers_that_disconnect_before_the_answer_give_their_places_back(
    era: Era, llm: FakeLLM, tmp_path: Path
) -> None:
    """As above over HTTP: 100 calls at once while the database is held, 95 refused at once; the 5 waiting callers
    close their connections. No task runs for them (on a 2025-11-25 session too, which the SDK keeps serving after
    its caller has gone), and 5 others start."""
    store = tmp_path / "state.sqlite3"
    settings = Settings(model="openai:fake-model", conversations_db=store, max_tasks=LIMIT)
    server = build_server(settings, {}, openai_env(llm))
    refused: list[str] = []
    with held(llm, LIMIT):
        async with (
            serving_asgi(lambda _url: http_app(server, host="127.0.0.1")) as url,
            caller(f"{url}/mcp", era) as host,
        ):
            await host.error("tasks/get", {"taskId": "0" * 26})  # an unknown task: its read makes the database
            db = sqlite3.connect(store, isolation_level=None)
            try:
                db.execute("begin immediate")
                async with httpx2.AsyncClient(headers=host.http.headers, timeout=BOUND) as leaving:
                    # ids of its own: the session's requests must not reuse an id, even one whose caller has gone
                    gone = Caller(leaving, host.url, era, session=host.session, ids=10_000)

                    async def call(n: int) -> None:
                        answer = await gone.send("tools/call", http_task_params(era, f"gone {n}"))
                        refused.append(answer["error"]["message"])

                    async with anyio.create_task_group() as calls:
                        for n in range(100):
                            calls.start_soon(call, n)
                        await wait_for(lambda: len(refused) == 100 - LIMIT)
                        calls.cancel_scope.cancel()
                # the 5 connections are closed: their callers have gone
                db.execute("commit")
            finally:
                if db.in_transaction:
                    db.execute("commit")
                db.close()
            again: list[str] = []
            with anyio.fail_after(BOUND):
                while len(again) < LIMIT:
                    answer = await host.send("tools/call", http_task_params(era, "again"))
                    if "error" in answer:
                        assert answer["error"]["message"] == REFUSED
                        await anyio.sleep(0.05)  # polling for the place, as a refused host would
                    else:
                        again.append(answer["result"]["taskId" if era == MODERN else "task"])
            await wait_for(lambda: len(llm.requests) == LIMIT)
    assert set(refused) == {REFUSED}
    assert count(store, "runs") == LIMIT  # the tasks of the callers gone never ran
    assert all("again" in str(seen.body) for seen in llm.requests)


def http_task_params(era: Era, task: str) -> dict[str, Any]:
    params: dict[str, Any] = {"name": "agent", "arguments": {"task": task}}
    return params if era == MODERN else {**params, "task": {}}


def task_params(raw: Raw, task: str) -> dict[str, Any]:
    """The params of a task-augmented call of `agent`, in the era of `raw`."""
    params: dict[str, Any] = {"name": "agent", "arguments": {"task": task}}
    return params if raw.modern else {**params, "task": {}}
