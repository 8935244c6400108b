"""Regexes from outside never hold the server (issue 29, item 1; core/patterns.py): a model's catastrophic
`read_result` pattern, and a hostile child's schema `pattern` / `patternProperties` against the model's arguments.

Through `meta-agent serve --transport http` as a subprocess, with the fake model endpoint playing a prompt-injected
model and tests/fixtures/hostile_schema_server.py the hostile child: while one caller's run makes catastrophic checks
one after another (several seconds of them), `/health` answers and another caller's `ask` completes; each check is a
one-line tool error the model reads, and the run goes on to its answer. SIGTERM during such a check ends the server
within seconds. (Python's `re` held the interpreter's lock for the whole match: the server answered nothing, and
ignored SIGTERM, for as long as the match took, hours for these inputs.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from conftest import FAULT_SERVER, TESTS, ServerLog, free_port, openai_env, tool_spec
from fake_llm import FakeLLM, openai_reply
from fault_harness import requests_of, told, until
from handle_llm import HandleLLM
from hostile_schema_server import ALTERNATING, NESTED
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from meta_agent.core.tool_call import ArgumentCheck
from meta_agent.core.tools import ToolSpec

pytestmark = pytest.mark.anyio

HOSTILE = TESTS / "fixtures" / "hostile_schema_server.py"
TOO_SLOW = "read_result: the pattern took too long (over 1 s); use a simpler one"
LONG_LINE = "a" * 5_000 + "!"  # "(a+)+$" on it: hours in `re`, over the budget in `regex`
A41 = "a" * 41 + "!"  # the argument that froze the server on a child's "^(a+)+$"
CHECKS = 6  # catastrophic checks in a row in one run: seconds in which the server must serve everyone else
PROBE = 10.0  # what /health and another caller's ask get to answer in; they take milliseconds
RUN_BOUND = 60.0  # a whole hostile run beside the others: about 10 s
SIGTERM_BOUND = 10.0  # the server ends within this of SIGTERM (stdio children get 2 s + 2 s to end)


def slow_code_error(alias: str, where: str, what: str) -> str:
    return (
        f"invalid arguments for {alias}: {where}: the tool's schema pattern {ALTERNATING!r} took too long to check"
        f" this {what} (over 1 s); send a shorter or simpler one"
    )


@pytest.fixture(scope="module")
def handle_llm() -> Iterator[HandleLLM]:
    with HandleLLM() as fake:
        yield fake


@pytest.fixture
def llm(handle_llm: HandleLLM) -> HandleLLM:
    handle_llm.clear()
    handle_llm.requests.clear()
    return handle_llm


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hostile") / "servers.json"
    servers = {
        "f": {"command": sys.executable, "args": [str(FAULT_SERVER)]},
        "h": {"command": sys.executable, "args": [str(HOSTILE)]},
    }
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


@contextmanager
def serving(config: Path, llm: FakeLLM) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`meta-agent serve --transport http` on a free port, results over 1,000 characters kept for read_result; its
    base URL and process. Stopped by SIGTERM after, or killed if that does not end it (a frozen server ignores it)."""
    port = free_port()
    environ = openai_env(llm, model="openai:fake-model", base=os.environ, META_AGENT_RESULT_INLINE_CHARS="1000")
    command = [sys.executable, "-m", "meta_agent", "serve", "--transport", "http", "--port", str(port)]
    proc = subprocess.Popen([*command, "--config", str(config)], env=environ, stderr=subprocess.PIPE, text=True)
    log = ServerLog(proc.stderr)
    try:
        log.wait_for("serving_http")
        yield f"http://127.0.0.1:{port}", proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()


@pytest.fixture(scope="module")
def server(config: Path, handle_llm: HandleLLM) -> Iterator[str]:
    with serving(config, handle_llm) as (url, _):
        yield url


@asynccontextmanager
async def caller(url: str) -> AsyncIterator[Client]:
    """A caller of its own: an MCP session over HTTP."""
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=300)) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
    ):
        yield client


def script(llm: FakeLLM, tag: str, calls: list[tuple[str, dict[str, Any]]], answer: str) -> None:
    """The run tagged `tag` makes `calls`, one a step, then answers."""
    for number, (tool, arguments) in enumerate(calls):
        llm.reply(openai_reply(None, (f"c{number}", tool, arguments)), match=tag)
    llm.reply(openai_reply(answer), match=tag)


async def run_beside_others(url: str, llm: FakeLLM, tag: str, hostile_from: int) -> dict[str, Any]:
    """Call `agent` for the run tagged `tag` (scripted already); once the model has handed out the first hostile call
    (its `hostile_from`th request, 1-based, was answered), probe /health and have another caller `ask`, both while
    the run's checks go on; the run's structured result once it ends."""
    structured: dict[str, Any] = {}
    with anyio.fail_after(RUN_BOUND):
        await _beside_others(url, llm, tag, hostile_from, structured)
    return structured


async def _beside_others(url: str, llm: FakeLLM, tag: str, hostile_from: int, structured: dict[str, Any]) -> None:
    async with caller(url) as client, anyio.create_task_group() as tg:

        async def run() -> None:
            result = await client.call_tool("agent", {"task": f"Do it {tag}"})
            assert not result.is_error and result.structured_content is not None, result.content
            structured.update(result.structured_content)

        tg.start_soon(run)
        await until("the first hostile call", lambda: requests_of(llm, tag) >= hostile_from)
        with within(PROBE, "/health to answer while the hostile checks ran"):
            async with httpx2.AsyncClient(timeout=PROBE) as http:
                assert (await http.get(f"{url}/health")).json()["status"] == "ok"
        llm.reply(openai_reply("Here I am."), match="[other]")
        with within(PROBE, "another caller's ask to complete while the hostile checks ran"):
            async with caller(url) as other:
                asked = await other.call_tool("ask", {"prompt": "Are you there? [other]"})
        assert not asked.is_error and asked.structured_content is not None
        assert asked.structured_content["answer"] == "Here I am."
        assert not structured, f"the hostile run was over before the others were served: {errors_of(structured)}"


@contextmanager
def within(seconds: float, what: str) -> Iterator[None]:
    try:
        with anyio.fail_after(seconds):
            yield
    except TimeoutError:
        pytest.fail(f"waited {seconds:g} s for {what}")


def errors_of(structured: dict[str, Any]) -> list[str | None]:
    return [call.get("error") for step in structured["steps"] for call in step["tool_calls"]]


async def test_a_catastrophic_read_result_pattern_holds_nothing(server: str, llm: HandleLLM) -> None:
    tag = "[nested read]"
    reads = [("read_result", {"handle": "HANDLE", "pattern": "(a+)+$"})] * CHECKS
    script(llm, tag, [("f__echo", {"text": LONG_LINE}), *reads], "No line ends in a's, as far as I can tell.")
    structured = await run_beside_others(server, llm, tag, hostile_from=2)
    assert structured["stop_reason"] == "final" and structured["answer"].startswith("No line ends")
    assert errors_of(structured) == [None, *[TOO_SLOW] * CHECKS]
    seen = told(llm, tag)  # what the model read: the one line, each time
    assert [seen[f"c{n}"] for n in range(1, CHECKS + 1)] == [f"[error] {TOO_SLOW}"] * CHECKS


async def test_a_child_schema_pattern_holds_nothing(server: str, llm: FakeLLM) -> None:
    """The literal "^(a+)+$" answers at once (no match); "^(a|aa)+$", too slow for any backtracking engine, is a
    one-line error naming the tool and the argument, each time within the budget."""
    tag = "[schema pattern]"
    calls = [("h__code", {"code": A41}), *[("h__slow_code", {"code": A41})] * CHECKS, ("h__code", {"code": "aaa"})]
    script(llm, tag, calls, "The codes were refused.")
    structured = await run_beside_others(server, llm, tag, hostile_from=1)
    assert structured["stop_reason"] == "final" and structured["answer"] == "The codes were refused."
    nested = f"invalid arguments for h__code: code: {A41!r} does not match {NESTED!r}"
    slow = slow_code_error("h__slow_code", "code", "value")
    assert errors_of(structured) == [nested, *[slow] * CHECKS, None]
    assert told(llm, tag)[f"c{CHECKS + 1}"] == 'code got {"code": "aaa"}'  # a fine value still reaches the child


async def test_a_child_schema_pattern_properties_hold_nothing(server: str, llm: FakeLLM) -> None:
    """patternProperties match the model's argument *names*; additionalProperties: false matches them again."""
    tag = "[schema names]"
    calls = [("h__named", {A41: "x"}), ("h__closed", {A41: "x"})] * (CHECKS // 2) + [("h__closed", {"aa": "x"})]
    script(llm, tag, calls, "The names were refused.")
    structured = await run_beside_others(server, llm, tag, hostile_from=1)
    assert structured["stop_reason"] == "final" and structured["answer"] == "The names were refused."
    refused = [slow_code_error(f"h__{tool}", A41, "property name") for tool in ("named", "closed")]
    assert errors_of(structured) == [*refused * (CHECKS // 2), None]
    assert told(llm, tag)[f"c{CHECKS}"] == 'closed got {"aa": "x"}'


async def test_sigterm_during_a_catastrophic_check_ends_the_server(config: Path, llm: HandleLLM) -> None:
    """Each line on its own takes `re` about a second, all of them together half a minute: the first check ends (with
    `re` too), and SIGTERM comes while the second runs."""
    tag = "[sigterm]"
    lines = "\n".join(["a" * 33 + "!"] * 30)
    reads = [("read_result", {"handle": "HANDLE", "pattern": "(a|aa)+$"})] * 30
    script(llm, tag, [("f__echo", {"text": lines}), *reads], "never")
    with serving(config, llm) as (url, proc):
        async with caller(url) as client, anyio.create_task_group() as tg:

            async def doomed() -> None:
                with suppress(Exception):  # the server goes away under it
                    await client.call_tool("agent", {"task": f"Do it {tag}"})

            tg.start_soon(doomed)
            await until("the second check", lambda: requests_of(llm, tag) >= 3, timeout=120)
            proc.send_signal(signal.SIGTERM)
            start = time.monotonic()
            code = await anyio.to_thread.run_sync(lambda: ended(proc, SIGTERM_BOUND))
            assert code == 128 + signal.SIGTERM, f"still running {time.monotonic() - start:.0f} s after SIGTERM"
            tg.cancel_scope.cancel()


def ended(proc: subprocess.Popen[str], bound: float) -> int | None:
    try:
        return proc.wait(timeout=bound)
    except subprocess.TimeoutExpired:
        return None


# -- the argument check on its own ------------------------------------------------------------------------------------


def spec(schema: dict[str, Any]) -> ToolSpec:
    return tool_spec(schema)


def with_code(pattern: str) -> dict[str, Any]:
    return {"type": "object", "properties": {"code": {"type": "string", "pattern": pattern}}}


def slow_problem(where: str, what: str = "value") -> str:
    """The problem ArgumentCheck names (the loop puts "invalid arguments for TOOL: " before it)."""
    return slow_code_error("", where, what).removeprefix("invalid arguments for : ")


async def test_a_slow_schema_check_runs_off_the_event_loop() -> None:
    """Checking against a schema with a regex runs in a worker thread that lets go of the interpreter's lock: the
    event loop keeps turning through the whole second of it."""
    turns = 0
    async with anyio.create_task_group() as tg:

        async def turn() -> None:
            nonlocal turns
            while True:
                await anyio.sleep(0.01)
                turns += 1

        tg.start_soon(turn)
        problem = await ArgumentCheck().checked(spec(with_code(ALTERNATING)), {"code": A41})
        tg.cancel_scope.cancel()
    assert problem == slow_problem("code")
    assert turns >= 10, f"the event loop turned {turns} times in the check's second"


@pytest.mark.parametrize(
    ("schema", "arguments", "problem"),
    [
        # Inside `not`, the error is swallowed; the spent budget is still told, without a path jsonschema never gave.
        ({"properties": {"code": {"not": {"pattern": ALTERNATING}}}}, {"code": A41}, slow_problem("")[2:]),
        # A long value or name is quoted short.
        (with_code("^b+$"), {"code": "a" * 10_000}, f"code: '{'a' * 78}… does not match '^b+$'"),
        (
            {"patternProperties": {"^x": {}}, "additionalProperties": False},
            {"y" * 100: 1},
            f"'{'y' * 78}… does not match any of the regexes: '^x'",
        ),
        # A pattern too long to compile quickly, or jsonschema's unevaluatedProperties beside patternProperties
        # (which it would match with `re`): the schema cannot be used to check, and the child checks for itself.
        (with_code("a" * 10_001), {"code": "x"}, None),
        ({"patternProperties": {ALTERNATING: {}}, "unevaluatedProperties": False}, {"a" * 30 + "!": 1}, None),
    ],
)
def test_what_the_bounded_check_says(schema: dict[str, Any], arguments: dict[str, Any], problem: str | None) -> None:
    assert ArgumentCheck().problem(spec({"type": "object", **schema}), arguments) == problem
