"""A hostile child's floods (children/stdout.py, meta_agent/shared/bounded_lines.py, records/log_repeats.py): a stdout line
without end costs no memory, an answer over the line limit fails its call at once in one line, and lines that all
differ, on stderr or stdout, are logged within a budget per child that counts every one of them."""

from __future__ import annotations

import io
import json
import math
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
import structlog
from captured_logs import logged_to
from conftest import TESTS, http_serving

from meta_agent.children.pool import ChildPool
from meta_agent.children.stdout import LINE_LIMIT, answered_id
from meta_agent.config.servers import ServerEntry
from meta_agent.errors import ChildProtocolError
from meta_agent.records.log_repeats import SOURCE_BUDGET
from meta_agent.shared.bounded_lines import EDGE, Overlong, lines_within

pytestmark = pytest.mark.anyio

FLOODING_CHILD = TESTS / "fixtures" / "flooding_child.py"
# Mebibytes a child writes without a newline: many times the line limit.
HUGE_MB = 256
# What meta-agent's memory may grow by while it reads that: the line limit and the parser's copies, far below it.
MEMORY_BOUND = 100 * 2**20
FLOOD = 50_000
# Generous bounds for a loaded 2-core machine.
WAIT = 60.0
FAST = 15.0


def flooding(*args: str, timeout: float = 60.0) -> ServerEntry:
    return ServerEntry(command=sys.executable, args=[str(FLOODING_CHILD), *args], timeout=timeout)


def text_of(result: Any) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


def events(text: str, event: str) -> list[dict[str, Any]]:
    return [line for line in map(json.loads, text.splitlines()) if line["event"] == event]


def written_and_counted(lines: list[dict[str, Any]]) -> tuple[int, int]:
    return len(lines), sum(1 + line.get("repeated", 0) for line in lines)


@contextmanager
def peak_memory() -> Iterator[list[int]]:
    """[growth]: how far this process's resident memory rose above where it was, sampled by a thread meanwhile."""
    me = psutil.Process()
    before = me.memory_info().rss
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.005):
            peak[0] = max(peak[0], me.memory_info().rss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    growth = [0]
    try:
        yield growth
    finally:
        done.set()
        sampler.join()
        growth[0] = peak[0] - before


async def test_a_line_without_end_on_a_childs_stdout_costs_no_memory() -> None:
    with structlog.testing.capture_logs() as logs, peak_memory() as growth:
        async with ChildPool({"f": flooding("--huge", str(HUGE_MB))}, restart=False) as pool:
            with anyio.fail_after(WAIT):
                await pool.wait_settled()
            assert pool["f"].status.state == "ready", pool["f"].status.error
            assert text_of(await pool["f"].call("echo", {"text": "after the flood"})) == "after the flood"
    assert growth[0] < MEMORY_BOUND, f"grew by {growth[0] / 2**20:.0f} MiB"
    bad = [entry["error"] for entry in logs if entry["event"] == "child_bad_output"]
    assert bad == ["OverlongLine: a line on stdout over 16 MiB, dropped unread"], bad


@pytest.mark.parametrize("id_last", [False, True], ids=["id-first", "id-last"])
async def test_a_call_whose_answer_is_over_the_limit_fails_at_once_and_the_child_serves_on(id_last: bool) -> None:
    async with ChildPool({"f": flooding()}, restart=False) as pool:
        with anyio.fail_after(WAIT):
            await pool.wait_settled()
        child = pool["f"]
        started = time.monotonic()
        with anyio.fail_after(FAST), pytest.raises(ChildProtocolError) as failed:
            await child.call("huge_answer", {"mb": 20, "id_last": id_last})
        assert time.monotonic() - started < FAST
        assert str(failed.value) == (
            "f: huge_answer failed: the child's answer was over 16 MiB, dropped unread (JSON-RPC error -32603)"
        )
        assert text_of(await child.call("echo", {"text": "still here"})) == "still here"
        assert (child.status.state, child.status.restarts) == ("ready", 0)


def test_floods_of_different_lines_from_a_child_are_logged_within_its_budget(tmp_path: Path) -> None:
    config = tmp_path / "servers.json"
    entry = {"command": sys.executable, "args": [str(FLOODING_CHILD), "--stderr", str(FLOOD), "--stdout", str(FLOOD)]}
    config.write_text(json.dumps({"mcpServers": {"flood": entry}}))
    started = time.monotonic()
    with http_serving(config, {**os.environ, "META_AGENT_LOG_LEVEL": "info"}) as (_, log):
        log.wait_for("child_ready")
        deadline = started + WAIT
        while time.monotonic() < deadline and not all(
            written_and_counted(flooded(log.lines, event))[1] == FLOOD for event in ("child_stderr", "child_bad_output")
        ):
            time.sleep(0.05)  # polled, with a bound: the last lines held back are written a second later
        seconds = time.monotonic() - started
        for event in ("child_stderr", "child_bad_output"):
            written, counted = written_and_counted(flooded(log.lines, event))
            assert counted == FLOOD, (event, written, counted)
            assert written <= (SOURCE_BUDGET + 1) * (math.ceil(seconds) + 1), (event, written, seconds)


def flooded(lines: list[str], event: str) -> list[dict[str, Any]]:
    found = [json.loads(line) for line in lines]
    return [line for line in found if line["event"] == event and line.get("server") == "flood"]


async def test_a_burst_of_different_lines_is_held_to_the_budget_of_each_child_and_counted() -> None:
    stream = io.StringIO()
    started = time.monotonic()
    with logged_to(stream):
        log = structlog.get_logger("meta_agent.children.connect")
        for n in range(1000):
            word = "".join(chr(ord("a") + int(digit)) for digit in f"{n:04d}")  # letters only: no two alike
            for server in ("one", "two"):
                log.info("child_stderr", server=server, line=f"warning: cannot open {word}")
            log.info("child_stderr", server="same", line="the same line again")
    windows = math.ceil(time.monotonic() - started) + 1
    for server, bound in (
        ("one", (SOURCE_BUDGET + 1) * windows),
        ("two", (SOURCE_BUDGET + 1) * windows),
        ("same", windows + 1),
    ):
        lines = [line for line in events(stream.getvalue(), "child_stderr") if line["server"] == server]
        written, counted = written_and_counted(lines)
        assert counted == 1000 and written <= bound, (server, written, bound)


async def received(chunks: list[bytes], limit: int) -> list[bytes | Overlong]:
    pieces = iter(chunks)

    async def receive() -> bytes:
        return next(pieces, b"")

    return [line async for line in lines_within(receive, limit)]


async def test_a_line_over_the_limit_keeps_only_its_ends() -> None:
    long = b"<" + b"x" * 5000 + b">"
    assert await received([b"ok\n", long[:2000], long[2000:] + b"\nnext\n", long], 100) == [
        b"ok\n",
        Overlong(long[:EDGE], long[-EDGE:]),
        b"next\n",
        Overlong(long[:EDGE], long[-EDGE:]),
    ]
    assert await received([b"a" * 101 + b"\n", b"b" * 100 + b"\n"], 100) == [
        Overlong(b"a" * 101, b"a" * 101),
        b"b" * 100 + b"\n",
    ]


@pytest.mark.parametrize(
    ("head", "tail", "expected"),
    [
        (b'{"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "te', b'xxxx"}]}}', 7),
        (b'{"result": {"content": [{"type": "text", "text": "x', b'xx"}]}, "jsonrpc": "2.0", "id": "a-1"}', "a-1"),
        (b'{"id": 3, "error": {"code": 1, "message": "x', b'xxx"}}', 3),
        # a request or a notification of the child's: no call of ours to fail
        (b'{"jsonrpc": "2.0", "id": 4, "method": "sampling/createMessage", "params": {"x', b'x"}}', None),
        (b'{"method": "notifications/message", "params": {"data": "x', b'x"}, "jsonrpc": "2.0", "id": 5}', None),
        # an id nested in the large value, or none that is an id
        (b'{"result": {"id": 8, "content": "x', b'x", "id": 9}}', None),
        (b'{"jsonrpc": "2.0", "id": true, "result": "x', b'x"}', None),
        (b"x" * 100, b"x" * 100, None),
        (b"{" * 1000, b"}" * 1000, None),
    ],
)
def test_the_id_of_an_answer_over_the_limit_is_read_from_its_ends(
    head: bytes, tail: bytes, expected: int | str | None
) -> None:
    assert answered_id(Overlong(head, tail)) == expected
    assert LINE_LIMIT == 16 * 2**20
