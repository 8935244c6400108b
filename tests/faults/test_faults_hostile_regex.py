"""The fault suite's hostile regex group (category hostile_input; tests/faults/test_faults.py describes the suite, the
harness is tests/fixtures/fault_harness.py): a prompt-injected model's catastrophic `read_result` patterns, and a
hostile child's catastrophic schema `pattern`, `patternProperties` and `additionalProperties` against the model's
arguments, through our real front in memory.

Each fault is checked: the run goes on to its answer, the model got one line for the hostile call (the same line as
in the tool call's record), and the event loop never stopped turning for STALL meanwhile. The inputs are sized so
Python's `re` ends on them within seconds (it held the loop that long; on a longer one, for hours): today's code fails
each fault in finite time.
"""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from conftest import TESTS
from fake_llm import openai_reply
from fault_harness import (  # noqa: F401  (this module's fixtures)
    answer_with,
    call,
    calls_of,
    finished,
    group,
    injecting,
    log_to_a_list,
    serving,
    told,
)
from fault_tally import TALLY
from handle_llm import HandleLLM
from hostile_schema_server import ALTERNATING, NESTED

from meta_agent.config.servers import ServerEntry

pytestmark = pytest.mark.anyio

GROUPS = {"hostile_regex"}
TALLY.expected_groups |= GROUPS

HOSTILE = ServerEntry(command=sys.executable, args=(str(TESTS / "fixtures" / "hostile_schema_server.py"),))
BARE = ServerEntry(command=sys.executable, args=(str(TESTS / "fixtures" / "bare_server.py"),))
TICK = 0.02  # how often the watcher task wakes
STALL = 2.0  # the longest the event loop may go without turning; `re` held it 5 s and more on these inputs
SLOW = "read_result: the pattern took too long (over 1 s); use a simpler one"
# 40 a's and a "!": "(a|aa)+$" takes `re` some 10 s (longer unanchored), `regex` past its budget. 30: "^(a+)+$" takes
# `re` some 6 s (and 29 unanchored 25 s), `regex` a millisecond: it answers (no match) at once.
ALTERNATING_VALUE = "a" * 40 + "!"
NESTED_VALUE = "a" * 30 + "!"
KEPT = "hay\n" * 300  # over the 1,000 characters of META_AGENT_RESULT_INLINE_CHARS below: the result is kept


@pytest.fixture(scope="module")
def llm_endpoint() -> Iterator[HandleLLM]:
    """This module's fake model endpoint (tests/conftest.py's `llm` takes it) uses the handles it is given."""
    with HandleLLM() as fake:
        yield fake


def slow_check(alias: str, where: str, what: str) -> str:
    return (
        f"invalid arguments for {alias}: {where}: the tool's schema pattern {ALTERNATING!r} took too long to check"
        f" this {what} (over 1 s); send a shorter or simpler one"
    )


# name -> the hostile call (the step after the call `b__echo` that gives a kept result, for read_result), and the line
# the model reads of it: an error (also the call's record), or the start of an answer.
FAULTS: dict[str, tuple[str, dict[str, Any], str, bool]] = {
    "read_result_alternating": ("read_result", {"handle": "HANDLE", "pattern": "(a|aa)+$"}, SLOW, True),
    "read_result_nested": ("read_result", {"handle": "HANDLE", "pattern": "(a+)+$"}, "[no matching line in ", False),
    "schema_pattern_nested": (
        "h__code",
        {"code": NESTED_VALUE},
        f"invalid arguments for h__code: code: {NESTED_VALUE!r} does not match {NESTED!r}",
        True,
    ),
    "schema_pattern_alternating": (
        "h__slow_code",
        {"code": ALTERNATING_VALUE},
        slow_check("h__slow_code", "code", "value"),
        True,
    ),
    "schema_pattern_properties": (
        "h__named",
        {ALTERNATING_VALUE: "x"},
        slow_check("h__named", ALTERNATING_VALUE, "property name"),
        True,
    ),
    "schema_additional_properties": (
        "h__closed",
        {ALTERNATING_VALUE: "x"},
        slow_check("h__closed", ALTERNATING_VALUE, "property name"),
        True,
    ),
}


@asynccontextmanager
async def watching_the_loop() -> AsyncIterator[list[float]]:
    """While inside, a task notes the longest time the event loop took to wake it (the list's one item)."""
    longest = [0.0]

    async def watch() -> None:
        last = time.monotonic()
        while True:
            await anyio.sleep(TICK)
            now = time.monotonic()
            longest[0] = max(longest[0], now - last)
            last = now

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        yield longest
        tg.cancel_scope.cancel()


async def test_hostile_regex(llm: HandleLLM) -> None:
    servers = {"h": HOSTILE, "b": BARE}
    async with group("hostile_regex", "hostile_input"), serving(llm, servers, result_inline_chars=1_000) as (client, _):
        for name, (tool, arguments, line, is_error) in FAULTS.items():
            async with injecting("hostile_input") as faults:
                tag = f"[{name}]"
                text = KEPT + (ALTERNATING_VALUE if "alternating" in name else NESTED_VALUE)
                llm.reply(openai_reply(None, ("c0", "b__echo", {"text": text})), match=tag)
                answer_with(llm, tag, ("c1", tool, arguments))
                async with watching_the_loop() as longest:
                    structured = finished(await call(client, "agent", {"task": f"Go {tag}"}))
                assert longest[0] < STALL, f"{name}: the event loop stood still for {longest[0]:.1f} s"
                [record] = calls_of(structured, step=1)
                seen = told(llm, tag)["c1"]
                if is_error:
                    assert (record.get("error"), seen) == (line, f"[error] {line}"), name
                else:
                    assert record["ok"] and seen.startswith(line), (name, seen)
                faults.handled()
