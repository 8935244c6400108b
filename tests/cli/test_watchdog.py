"""cli/watchdog.py: a `meta-agent serve` whose event loop stops turning leaves with exit status 70 and one log line
saying what its runs were doing, or, when the stalled work holds the interpreter's lock, through the faulthandler
backstop; its children do not outlive it; a slow call is no stall."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import anyio
import httpx2
import psutil
import pytest
from conftest import FAULT_SERVER, TESTS, ServerLog, free_port, openai_env, pid_alive
from fake_llm import FakeLLM, openai_reply
from mcp import Client

from meta_agent.cli.watchdog import EXIT_STALLED

pytestmark = pytest.mark.anyio

STALLING_SERVE = TESTS / "fixtures" / "stalling_serve.py"
STALL_SECONDS = 3  # a server's start is no stall of 3 s even with every core of the machine busy
WAIT_ANSWERING = 600  # polls of /health, 50 ms apart
EXIT_WITHIN = 90.0  # the backstop fires 13 s after the stall; the rest is room for a loaded machine


@contextmanager
def stallable(llm: FakeLLM, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str, ServerLog]]:
    """`meta-agent serve --transport http` that the test can stall by a signal, with the fault server as child `f`."""
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"f": {"command": sys.executable, "args": [str(FAULT_SERVER)]}}}))
    environ = openai_env(llm, model="openai:fake-model")
    environ |= {"META_AGENT_STALL_SECONDS": str(STALL_SECONDS), "META_AGENT_TRACE_DIR": str(tmp_path / "traces")}
    port = free_port()
    command = [sys.executable, str(STALLING_SERVE), "serve", "--transport", "http", "--port", str(port)]
    proc = subprocess.Popen([*command, "--config", str(config)], env=environ, stderr=subprocess.PIPE, text=True)
    try:
        log = ServerLog(proc.stderr)
        log.wait_for("serving_http")
        health = f"http://127.0.0.1:{port}/health"
        with httpx2.Client() as http:  # serving: the watchdog is on
            for _ in range(WAIT_ANSWERING):
                with suppress(httpx2.TransportError):
                    if http.get(health).status_code == 200:
                        break
                time.sleep(0.05)  # a poll of a process that cannot tell when it is ready, not a synchronisation
            else:
                raise AssertionError("the server never answered /health")
        yield proc, f"http://127.0.0.1:{port}/mcp", log
    finally:
        proc.kill()
        proc.wait(timeout=30)
        assert proc.stderr is not None
        proc.stderr.close()


async def children_of(proc: subprocess.Popen[str]) -> list[psutil.Process]:
    """The server's child processes, once child `f` has started."""
    with anyio.fail_after(30):
        while not (children := psutil.Process(proc.pid).children(recursive=True)):
            await anyio.sleep(0.05)
    return children


def stall_line(log: ServerLog) -> dict[str, object]:
    lines = [json.loads(line) for line in log.lines if "event_loop_stalled" in line]
    assert len(lines) == 1, log.lines[-5:]
    return lines[0]


async def exit_status(proc: subprocess.Popen[str]) -> int:
    with anyio.fail_after(EXIT_WITHIN):
        while proc.poll() is None:
            await anyio.sleep(0.05)
    return proc.returncode


async def test_a_stalled_loop_ends_the_process_with_70_and_its_children(llm: FakeLLM, tmp_path: Path) -> None:
    with stallable(llm, tmp_path) as (proc, _url, log):
        children = await children_of(proc)
        proc.send_signal(signal.SIGUSR1)
        assert await exit_status(proc) == EXIT_STALLED
        line = stall_line(log)
        assert line["level"] == "error" and line["exit_status"] == EXIT_STALLED
        assert float(line["stalled_s"]) >= STALL_SECONDS  # type: ignore[arg-type]
        with anyio.fail_after(10):
            while any(pid_alive(child.pid) for child in children):
                await anyio.sleep(0.05)
        assert not list((tmp_path / "traces").glob("stalled-*.txt")), "no dump when the thread could leave"


async def test_the_line_names_the_run_and_its_step(llm: FakeLLM, tmp_path: Path) -> None:
    with stallable(llm, tmp_path) as (proc, url, log):
        llm.reply(openai_reply(None, ("c1", "f__hang", {})))

        hanging = anyio.Event()

        async def progress(_progress: float, _total: float | None, message: str | None) -> None:
            if message == "step 1 · call f.hang {}":
                hanging.set()

        async def hang() -> None:
            with suppress(Exception):  # the server dies under the call: that is the test
                async with Client(url) as client:
                    await client.call_tool("agent", {"task": "hang"}, progress_callback=progress)

        async with anyio.create_task_group() as tg:
            tg.start_soon(hang)
            with anyio.fail_after(30):
                await hanging.wait()
            proc.send_signal(signal.SIGUSR1)
            assert await exit_status(proc) == EXIT_STALLED
            tg.cancel_scope.cancel()
        (run,) = stall_line(log)["runs"]  # type: ignore[misc]
        assert " · step 1 · call f.hang {}" in run, run


async def test_a_stall_holding_the_interpreters_lock_is_ended_by_the_backstop(llm: FakeLLM, tmp_path: Path) -> None:
    with stallable(llm, tmp_path) as (proc, _url, log):
        proc.send_signal(signal.SIGUSR2)
        assert await exit_status(proc) == 1  # faulthandler's exit
        (dump,) = (tmp_path / "traces").glob("stalled-*.txt")
        assert "_backtrack" in dump.read_text()
        for line in log.lines:  # the dump went to its file: stderr is still one JSON object a line
            json.loads(line)


async def test_a_slow_call_is_no_stall(llm: FakeLLM, tmp_path: Path) -> None:
    """A call twice as long as the stall limit: the event loop turns all along, and the server lives on."""
    with stallable(llm, tmp_path) as (proc, url, log):
        seconds = STALL_SECONDS * 2
        llm.reply(openai_reply(None, ("c1", "f__slow", {"seconds": seconds})))
        llm.reply(openai_reply("slept"))
        async with Client(url) as client:
            result = await client.call_tool("agent", {"task": "sleep"})
        assert result.structured_content["answer"] == "slept"  # type: ignore[index]
        assert proc.poll() is None
        assert not any("event_loop_stalled" in line for line in log.lines)


async def test_a_process_paused_from_outside_is_no_stall(llm: FakeLLM, tmp_path: Path) -> None:
    """SIGSTOP for twice the stall limit (a debugger, `docker pause`), then SIGCONT: the server goes on. A watcher
    that took the pause for a stall would leave at its first look after it (a look every quarter of the limit)."""
    with stallable(llm, tmp_path) as (proc, url, log):
        proc.send_signal(signal.SIGSTOP)
        await anyio.sleep(STALL_SECONDS * 2)  # the pause being tested, not a wait for something to happen
        proc.send_signal(signal.SIGCONT)
        async with Client(url) as client:  # it answers: it runs again, its watcher too
            await client.list_tools()
        await anyio.sleep(STALL_SECONDS)  # four of the watcher's looks after the pause, as the stall limit's length
        async with Client(url) as client:
            await client.list_tools()
        assert proc.poll() is None
        assert not any("event_loop_stalled" in line for line in log.lines)
