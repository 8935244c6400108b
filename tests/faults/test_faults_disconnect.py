"""The fault suite: callers that go away mid-call, over real HTTP (our front served by uvicorn on 127.0.0.1), in both
protocol eras. Each fault drops the caller at a seeded point: while the run waits for the model, while a child's
call hangs, or while the run waits for the user's approval (2025-11-25 only: a 2026-07-28 run parks between rounds
instead). The caller is a raw HTTP client that closes its connection, or the SDK's real `Client` in a process that
is killed (tests/fixtures/dying_client.py). Each time, within a few seconds, the run ends as cancelled in its
trace, a child's call is cancelled in the child, nothing more is asked of the model, and the child is kept.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as t
import pytest
import uvicorn
from anyio.streams.buffered import BufferedByteReceiveStream
from conftest import TESTS, free_port, openai_env
from fake_llm import FakeLLM, openai_reply
from fault_harness import (  # noqa: F401  (this module's fixtures)
    LOG,
    MODEL,
    WAIT,
    faulty_entry,
    group,
    injecting,
    log_to_a_list,
    nothing_running,
    pid_of,
    requests_of,
    still_the_same,
    until,
)
from fault_tally import TALLY

from meta_agent.config.settings import Settings
from meta_agent.engine import Engine
from meta_agent.front.http.app import http_app
from meta_agent.front.server import build_server

pytestmark = pytest.mark.anyio

CATEGORY = "caller_disconnect"
GROUPS = {"caller_disconnect_legacy", "caller_disconnect_modern", "caller_disconnect_killed"}
TALLY.expected_groups |= GROUPS

# "Within a few seconds" of the caller going away; generous for a loaded 2-core machine (it takes milliseconds).
GONE_BOUND = 10.0
LEGACY, MODERN = "2025-11-25", "2026-07-28"
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
DYING_CLIENT = TESTS / "fixtures" / "dying_client.py"
MAX_LINE = 65536


# -- our front over real HTTP ------------------------------------------------------------------------------------------


@asynccontextmanager
async def serving_http(llm: FakeLLM, traces: Path) -> AsyncIterator[tuple[str, Engine]]:
    """`meta-agent serve --transport http` in this process (uvicorn on a free port), with fault_server as child f:
    its /mcp URL and the engine."""
    server = build_server(Settings(model=MODEL, trace_dir=traces), {"f": faulty_entry()}, openai_env(llm))
    port = free_port()
    config = uvicorn.Config(
        http_app(server, host="127.0.0.1"), host="127.0.0.1", port=port, log_config=None, access_log=False, ws="none"
    )
    web = uvicorn.Server(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(web.serve)
        try:
            await until("the HTTP server to start", lambda: web.started)
            engine = server.engine
            assert engine is not None
            with anyio.fail_after(WAIT):
                await engine.pool.wait_settled()
            yield f"http://127.0.0.1:{port}/mcp", engine
        finally:
            web.should_exit = True


# -- callers that go away ----------------------------------------------------------------------------------------------


async def legacy_session(url: str) -> dict[str, str]:
    """A 2025-11-25 session that declares elicitation: the headers of its later requests."""
    hello = {
        "protocolVersion": LEGACY,
        "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "raw", "version": "0"},
    }
    async with httpx2.AsyncClient(timeout=WAIT) as http:
        opened = await http.post(url, headers=ACCEPT, json=_request("initialize", hello))
        assert opened.status_code == 200, opened.text
        headers = {**ACCEPT, "mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": LEGACY}
        done = await http.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert done.status_code == 202, done.text
    return headers


def agent_call(era: str, task: str) -> tuple[dict[str, str], dict[str, Any]]:
    """The era's headers beyond a session's, and the body, of a `tools/call` of `agent` with a progress token."""
    meta: dict[str, Any] = {"progressToken": 1}
    headers: dict[str, str] = {}
    if era == MODERN:
        meta |= {
            t.PROTOCOL_VERSION_META_KEY: MODERN,
            t.CLIENT_CAPABILITIES_META_KEY: {"elicitation": {}},
            t.CLIENT_INFO_META_KEY: {"name": "raw", "version": "0"},
        }
        headers = {**ACCEPT, "mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": "agent"}
    return headers, _request("tools/call", {"name": "agent", "arguments": {"task": task}, "_meta": meta})


def _request(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


async def call_and_drop(
    url: str, headers: dict[str, str], body: dict[str, Any], stop_at: str, then: Callable[[], Awaitable[None]]
) -> None:
    """POST the call, read its SSE stream up to the first message that contains `stop_at`, await `then()`, and
    close the connection without a word."""
    async with httpx2.AsyncClient(timeout=WAIT) as http, http.stream("POST", url, headers=headers, json=body) as sse:
        assert sse.status_code == 200, await sse.aread()
        async for line in sse.aiter_lines():
            if line.startswith("data: ") and stop_at in json.dumps(json.loads(line[6:]), ensure_ascii=False):
                await then()
                return
    raise AssertionError(f"the stream ended before {stop_at!r}")


async def kill_while(url: str, era: str, task: str, stop_at: str) -> None:
    """The SDK's Client in its own process calls `agent`; it is killed once it prints a line containing `stop_at`."""
    mode = "legacy" if era == LEGACY else "auto"
    process = await anyio.open_process([sys.executable, str(DYING_CLIENT), url, mode, task], stderr=subprocess.DEVNULL)
    try:
        assert process.stdout is not None
        lines = BufferedByteReceiveStream(process.stdout)
        with anyio.fail_after(WAIT):
            while stop_at not in (await lines.receive_until(b"\n", MAX_LINE)).decode():
                pass
    finally:
        process.kill()
        await process.wait()
        await process.aclose()


# -- where the caller goes away, and what must follow ------------------------------------------------------------------


class Point:
    """A point of the run where the caller goes away: what the model is told first, the message of the call's
    stream to wait for, and what must hold once the run has ended."""

    def __init__(self, name: str, llm: FakeLLM, engine: Engine, cancel_file: Path) -> None:
        self.name, self.llm, self.engine, self.cancel_file = name, llm, engine, cancel_file

    def prepare(self, tag: str) -> str:
        """Queue the model's answers for the run tagged `tag`; the text of the stream message to drop at."""
        if self.name == "model":  # answered only after the test is over, or when the request is abandoned
            self.llm.reply(openai_reply("too late"), delay=WAIT, match=tag)
            return "step 1 · model"
        if self.name == "child":
            self.llm.reply(openai_reply(None, ("c1", "f__hang", {"cancel_file": str(self.cancel_file)})), match=tag)
            return "f.hang: hanging"
        self.llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": "/srv/x"})), match=tag)
        return "elicitation/create"

    async def reached(self, tag: str) -> None:
        """Wait, with the caller still there, until the run is really at this point."""
        if self.name == "model":
            await until("the model request", lambda: requests_of(self.llm, tag) == 1)

    async def check(self, traces: Path, tag: str) -> None:
        records = await ended_cancelled(traces, tag)
        assert requests_of(self.llm, tag) == 1, "the model was asked again after the caller left"
        kinds = {record.get("kind") for record in records}
        if self.name == "child":
            await until("the child to see the cancel", self.cancel_file.exists, GONE_BOUND)
            await until("no call left running in the child", partial(nothing_running, self.engine.pool["f"]))
        if self.name == "approval":
            assert "approval_requested" in kinds and "approval_answered" not in kinds, kinds
        self.llm.clear()


async def ended_cancelled(traces: Path, tag: str) -> list[dict[str, Any]]:
    """The trace of the run tagged `tag`, once it has ended (within GONE_BOUND), checked to have ended cancelled."""
    records: list[dict[str, Any]] = []

    def ended() -> bool:
        nonlocal records
        for path in traces.glob("*.jsonl"):
            lines = path.read_text().split("\n")[:-1]  # whole lines only: the writer may be half-way through one
            if lines and tag in json.loads(lines[0]).get("task", ""):
                records = [json.loads(line) for line in lines]
                return records[-1].get("kind") in ("run_finished", "run_failed")
        return False

    await until(f"the run {tag} to end after its caller left", ended, GONE_BOUND)
    last = records[-1]
    assert last["kind"] == "run_finished" and last["result"]["stop_reason"] == "cancelled", last
    return records


def gone_logged() -> int:
    return sum(1 for event in LOG if event.get("event") == "caller_gone")


# -- the groups --------------------------------------------------------------------------------------------------------

DROPS = {LEGACY: 12, MODERN: 8}
POINTS = {LEGACY: ("model", "child", "approval"), MODERN: ("model", "child")}


def seeded_points(era: str, seed: int) -> list[str]:
    """Every point of the era once, the rest at random, in a random order."""
    rng = random.Random(seed)
    points = list(POINTS[era]) + [rng.choice(POINTS[era]) for _ in range(DROPS[era] - len(POINTS[era]))]
    rng.shuffle(points)
    return points


@pytest.mark.parametrize(("era", "seed"), [(LEGACY, 901), (MODERN, 902)], ids=["legacy", "modern"])
async def test_a_caller_that_closes_its_connection(era: str, seed: int, llm: FakeLLM, tmp_path: Path) -> None:
    """A raw HTTP caller closes its connection mid-call: the run is cancelled, and everything it was waiting on."""
    name = "caller_disconnect_legacy" if era == LEGACY else "caller_disconnect_modern"
    async with group(name, CATEGORY), serving_http(llm, tmp_path / "traces") as (url, engine):
        pid = await pid_of(engine.pool["f"])
        for i, where in enumerate(seeded_points(era, seed)):
            tag = f"[drop-{era}-{i}]"
            point = Point(where, llm, engine, tmp_path / f"cancel-{i}")
            stop_at = point.prepare(tag)
            session = await legacy_session(url) if era == LEGACY else {}
            headers, body = agent_call(era, tag)
            logged = gone_logged()
            async with injecting(CATEGORY) as fault:
                await call_and_drop(url, session | headers, body, stop_at, partial(point.reached, tag))
                await point.check(tmp_path / "traces", tag)
                if era == LEGACY:  # our own watch ended it (on 2026-07-28 the SDK's may be first)
                    assert gone_logged() > logged
                await still_the_same(engine.pool["f"], pid)
                fault.handled()


KILLS = [(LEGACY, "child"), (LEGACY, "approval"), (MODERN, "child")]
KILL_AT = {"child": "progress step 1 · f.hang: hanging", "approval": "asked meta-agent wants to run f.delete_file"}


async def test_a_caller_that_is_killed(llm: FakeLLM, tmp_path: Path) -> None:
    """The SDK's real Client is killed mid-call (no cancel, no goodbye; the kernel closes its sockets): the same."""
    async with group("caller_disconnect_killed", CATEGORY), serving_http(llm, tmp_path / "traces") as (url, engine):
        pid = await pid_of(engine.pool["f"])
        for i, (era, where) in enumerate(KILLS):
            tag = f"[killed-{era}-{i}]"
            point = Point(where, llm, engine, tmp_path / f"cancel-{i}")
            point.prepare(tag)
            async with injecting(CATEGORY) as fault:
                await kill_while(url, era, tag, KILL_AT[where])
                await point.check(tmp_path / "traces", tag)
                await still_the_same(engine.pool["f"], pid)
                fault.handled()
