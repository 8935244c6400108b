"""Child supervision against real child servers: our fault server, mcp-server-time and server-everything."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import mcp.types as t
import psutil
import pytest
import structlog
from conftest import (
    FAULT_SERVER,
    Changes,
    everything_entry,
    everything_over_http,
    fault_entry,
    pid_alive,
    time_entry,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from threaded_web import ThreadedWeb

from meta_agent.children import stderr as stderr_module
from meta_agent.children.pool import ChildPool
from meta_agent.children.stderr import LINE_MAX, stderr_pipe
from meta_agent.children.supervisor import ChildServer
from meta_agent.config.servers import ServerEntry, ToolFilter
from meta_agent.errors import ChildDied, ChildProtocolError, ChildTimeout, ChildUnavailable

pytestmark = pytest.mark.anyio


def text_of(result) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


@pytest.fixture(params=[False, True], ids=["loop-reads-stderr", "thread-reads-stderr"])
def stderr_read_in_thread(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """A stdio child's stderr read both ways: the event loop waiting on the pipe (POSIX), and blocking reads in a
    worker thread (what Windows does; it works on POSIX too, so that path is tested wherever the tests run)."""
    monkeypatch.setattr(stderr_module, "READ_IN_THREAD", request.param)
    return request.param


async def until(predicate: Callable[[], bool]) -> None:
    """Wait for what no event announces (a thread's progress, our open files) by looking again until it holds."""
    with anyio.fail_after(5):
        while not predicate():
            await anyio.sleep(0.01)


async def test_time_server_is_a_ready_child_with_its_tools() -> None:
    async with ChildPool({"time": time_entry()}) as pool:
        await pool.wait_settled()
        child = pool["time"]
        status = child.status
        assert (status.state, status.protocol_version, status.tool_count) == ("ready", "2026-07-28", 2)
        assert {tool.name for tool in child.tools} == {"get_current_time", "convert_time"}
        result = await child.call("get_current_time", {"timezone": "Asia/Tokyo"})
        assert not result.is_error
        assert "Asia/Tokyo" in text_of(result)


async def test_everything_over_stdio_speaks_2025_and_forwards_progress() -> None:
    async with ChildPool({"every": everything_entry()}) as pool:
        await pool.wait_settled()
        child = pool["every"]
        assert child.status.protocol_version == "2025-11-25"
        assert child.status.server_name == "mcp-servers/everything"
        messages: list[tuple[float, str | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            messages.append((progress, message))

        result = await child.call(
            "trigger-long-running-operation", {"duration": 0.3, "steps": 3}, on_progress=on_progress
        )
        assert not result.is_error
        assert [p for p, _ in messages] == [1, 2, 3]


async def test_everything_over_streamable_http(everything_http: str) -> None:
    async with ChildPool({"every": ServerEntry(url=everything_http)}) as pool:
        await pool.wait_settled()
        child = pool["every"]
        assert child.status.state == "ready", child.status.error
        assert child.status.transport == "http"
        result = await child.call("echo", {"message": "over http"})
        assert "over http" in text_of(result)


async def test_every_page_of_tools_is_read() -> None:
    async with ChildPool({"f": fault_entry("--extra-tools", "25", "--page-size", "7")}) as pool:
        await pool.wait_settled()
        names = {tool.name for tool in pool["f"].tools}
        assert {f"extra_{i}" for i in range(25)} <= names
        assert {"echo", "crash", "hang"} <= names


async def test_allow_and_deny_filter_the_childs_tools() -> None:
    entry = fault_entry(tools=ToolFilter(allow=("e*", "crash", "delete_*"), deny=("delete_*",)))
    async with ChildPool({"f": entry}) as pool:
        await pool.wait_settled()
        assert {tool.name for tool in pool["f"].tools} == {"echo", "crash"}


async def test_children_start_in_the_background() -> None:
    # The pool is entered while a child that never answers is still starting: nothing waits for it.
    async with ChildPool({"stuck": fault_entry("--never-start")}, start_timeout=30) as pool:
        assert pool["stuck"].status.state == "starting"
        with pytest.raises(ChildUnavailable, match="still starting"):
            await pool["stuck"].call("echo", {"text": "x"})


async def test_a_crash_mid_call_fails_fast_and_the_child_comes_back() -> None:
    changes = Changes()
    async with ChildPool({"f": fault_entry()}, on_change=changes) as pool:
        child = pool["f"]
        await changes.until(lambda: child.status.state == "ready")
        first_pid = int(text_of(await child.call("pid", {})))
        with pytest.raises(ChildDied, match=r"^f: the server exited during crash \(exit status 1\); restarting it$"):
            await child.call("crash", {})
        # Later calls fail at once while it restarts, saying so.
        assert child.status.state == "restarting"
        assert child.tools == ()
        with pytest.raises(ChildUnavailable, match=r"restart attempt 1"):
            await child.call("echo", {"text": "x"})
        await changes.until(lambda: child.status.state == "ready")
        assert child.status.restarts == 1
        assert {"echo", "crash"} <= {tool.name for tool in child.tools}
        assert int(text_of(await child.call("pid", {}))) != first_pid


async def test_a_child_that_exits_during_a_call_says_its_exit_status_and_last_stderr_line() -> None:
    """The call's error, and the child's status until it is back, say how it ended: its exit status (or the signal
    that killed it) and the last line it wrote to stderr during the call."""
    changes = Changes()
    async with ChildPool({"f": fault_entry()}, on_change=changes) as pool:
        for how, ended in [
            ("said", "exit status 7; its stderr ended with: fault_server: crashing as asked"),
            ("sigkill", "killed by SIGKILL"),
        ]:
            await changes.until(lambda: pool["f"].status.state == "ready")
            child = pool["f"]
            with pytest.raises(ChildDied) as died:
                await child.call("crash", {"how": how})
            assert str(died.value) == f"f: the server exited during crash ({ended}); restarting it"
            assert child.status.error == f"the server exited during crash ({ended})" or child.status.state == "ready"


async def test_a_child_whose_command_cannot_run_is_failed_until_a_reload_finds_it_mended(tmp_path: Path) -> None:
    """A command that does not exist, or cannot be run, is `failed` with the reason, not restarted for ever; a reload
    of servers.json (the same entry) tries it again, and it starts once mended."""
    script = tmp_path / "server.sh"
    servers = {"c": ServerEntry(command=str(script))}
    async with ChildPool(servers) as pool:
        await pool.wait_settled()
        status = pool["c"].status
        assert (status.state, status.error, status.retry_in) == ("failed", f"command not found: {script}", None)
        script.write_text(f"#!/bin/sh\nexec {sys.executable} {FAULT_SERVER}\n")  # there, but not executable
        assert pool.reconcile(servers).restarted == ("c",)
        await pool.wait_settled()
        status = pool["c"].status
        assert (status.state, status.error) == ("failed", f"cannot run {script}: permission denied")
        script.chmod(0o755)
        pool.reconcile(servers)
        await pool.wait_settled()
        assert pool["c"].status.state == "ready"
        assert pool.reconcile(servers).restarted == ()  # a child that is up is left alone


@pytest.mark.usefixtures("stderr_read_in_thread")
async def test_a_child_killed_between_calls_is_noticed_and_restarted() -> None:
    changes = Changes()
    async with ChildPool({"f": fault_entry()}, on_change=changes) as pool:
        child = pool["f"]
        await changes.until(lambda: child.status.state == "ready")
        pid = int(text_of(await child.call("pid", {})))
        os.kill(pid, signal.SIGKILL)
        await changes.until(lambda: child.status.state == "restarting")
        assert "stderr" in (child.status.error or "")
        await changes.until(lambda: child.status.state == "ready")
        assert int(text_of(await child.call("pid", {}))) != pid


async def test_the_backoff_grows_and_the_attempt_count_shows() -> None:
    changes = Changes()
    async with ChildPool({"bad": fault_entry("--exit-at-start")}, on_change=changes) as pool:
        child = pool["bad"]
        await changes.until(lambda: child.status.attempt >= 3)
        status = child.status
        assert status.state == "restarting"
        assert status.retry_in is not None and 0.5 < status.retry_in <= 2.0  # 0.5 s, 1 s, then 2 s
        assert "refusing to start" in (status.error or "")


async def test_a_timeout_cancels_the_call_and_the_child_keeps_working() -> None:
    async with ChildPool({"f": fault_entry(timeout=0.5)}) as pool:
        await pool.wait_settled()
        child = pool["f"]
        with pytest.raises(ChildTimeout, match=r"hang took longer than 0\.5 s"):
            await child.call("hang", {})
        assert text_of(await child.call("echo", {"text": "still here"})) == "still here"


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        (fault_entry("--exit-at-start"), "exited during start-up; its stderr ended with: fault_server: refusing"),
        (ServerEntry(command="no-such-command-anywhere"), "command not found: no-such-command-anywhere"),
        (fault_entry(cwd="/no/such/dir"), "cwd '/no/such/dir' is not a directory"),
        (ServerEntry(url="http://127.0.0.1:9/mcp"), "cannot reach http://127.0.0.1:9/mcp"),
        (  # named without the key its user info and query hold: the status is logged and shown to hosts
            ServerEntry(url="http://someone:pw-in-url@127.0.0.1:9/mcp?token=key-in-url#also"),
            "cannot reach http://127.0.0.1:9/mcp: ",
        ),
    ],
    ids=["exits-at-start", "no-command", "bad-cwd", "unreachable-url", "unreachable-url-with-a-key"],
)
async def test_a_child_that_cannot_start_says_why(entry: ServerEntry, reason: str) -> None:
    async with ChildPool({"c": entry}, restart=False) as pool:
        await pool.wait_settled()
        status = pool["c"].status
        assert status.state == "failed"
        assert reason in (status.error or "")


async def test_an_http_child_that_refuses_is_named_without_its_key() -> None:
    """An HTTP child that answers 401 is named by its URL, without what its user info and query hold."""

    async def refuse(_request: Request) -> Response:
        return PlainTextResponse("who are you?", status_code=401)

    app = Starlette(routes=[Route("/mcp", refuse, methods=["GET", "POST", "DELETE"])])
    with ThreadedWeb(app) as web:
        entry = ServerEntry(url=f"http://someone:pw-in-url@127.0.0.1:{web.port}/mcp?token=key-in-url")
        async with ChildPool({"c": entry}, restart=False) as pool:
            await pool.wait_settled()
            assert pool["c"].status.error == f"HTTP 401 from {web.url}/mcp (check its headers)"


async def test_a_child_that_never_answers_fails_after_the_start_timeout() -> None:
    async with ChildPool({"c": fault_entry("--never-start")}, restart=False, start_timeout=1) as pool:
        await pool.wait_settled()
        assert pool["c"].status.error == "no answer within 1 s"


async def test_stdout_garbage_before_serving_is_reported_not_fatal() -> None:
    with structlog.testing.capture_logs() as logs:
        async with ChildPool({"g": fault_entry("--garbage")}) as pool:
            await pool.wait_settled()
            assert pool["g"].status.state == "ready"
    assert any(entry["event"] == "child_bad_output" for entry in logs)


@pytest.mark.usefixtures("stderr_read_in_thread")
async def test_child_stderr_goes_to_our_log_not_our_stdout(capfd: pytest.CaptureFixture[str]) -> None:
    with structlog.testing.capture_logs() as logs:
        async with ChildPool({"f": fault_entry()}) as pool:
            await pool.wait_settled()
            await pool["f"].call("write_stderr", {"text": "a line from the child"})
            # the call's answer (stdout) may come before the line is read from the child's stderr, on a busy machine
            with anyio.fail_after(30):
                while not any(entry.get("line") == "a line from the child" for entry in logs):
                    await anyio.sleep(0.01)
    lines = [entry["line"] for entry in logs if entry["event"] == "child_stderr"]
    assert "a line from the child" in lines
    captured = capfd.readouterr()
    assert "a line from the child" not in captured.out
    assert "a line from the child" not in captured.err


@pytest.mark.usefixtures("stderr_read_in_thread")
async def test_stderr_is_read_line_by_line_and_its_closing_is_seen_while_the_child_lives() -> None:
    script = (
        "import os, sys\n"
        f"sys.stderr.write('one\\ntwo\\r\\n' + 'x' * {LINE_MAX + 10} + '\\nlast')\n"
        "sys.stderr.flush()\n"
        "os.close(2)\n"
        "sys.stdin.read()\n"
    )
    lines: list[bytes] = []
    closed = anyio.Event()
    async with anyio.create_task_group() as tg:
        with stderr_pipe(tg, lines.append, closed.set) as errlog:
            child = await anyio.open_process([sys.executable, "-c", script], stderr=errlog)
        async with child:  # leaving closes its stdin, which ends it
            with anyio.fail_after(10):
                await closed.wait()
            assert child.returncode is None
    assert lines == [b"one", b"two", b"x" * LINE_MAX, b"x" * 10, b"last"]


# A child that ends when its stdin closes, or after 30 s: a failing test must not leave a read blocked for ever.
WAIT_FOR_STDIN = "import select, sys; select.select([sys.stdin], [], [], 30)"


def reading_stderr_in_a_thread() -> bool:
    """Whether some thread is in the threaded stderr reader's read now (blocked in `os.read`, most likely)."""
    frames = sys._current_frames().values()
    return any(f.f_code.co_filename == stderr_module.__file__ and f.f_code.co_name == "_read" for f in frames)


async def test_a_thread_read_cut_short_closes_the_pipe_once_the_child_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pump cancelled while its read blocks in a thread (Windows) leaves the closing to that thread: closing under
    the read would block the event loop there. The pipe is closed once its last writer, the child, has gone."""
    monkeypatch.setattr(stderr_module, "READ_IN_THREAD", True)
    open_files = psutil.Process().num_fds()
    closed = anyio.Event()
    async with anyio.create_task_group() as tg:
        with stderr_pipe(tg, lambda _line: None, closed.set) as errlog:
            child = await anyio.open_process([sys.executable, "-c", WAIT_FOR_STDIN], stderr=errlog)
        await until(reading_stderr_in_a_thread)
        reading = psutil.Process().num_fds()
        tg.cancel_scope.cancel()
    assert psutil.Process().num_fds() == reading  # nothing was closed under the read
    async with child:  # leaving closes its stdin, which ends it
        pass
    await until(lambda: psutil.Process().num_fds() <= open_files)
    assert not closed.is_set()


async def test_no_child_outlives_the_pool_even_one_that_ignores_sigterm() -> None:
    servers = {"plain": fault_entry(), "stubborn": fault_entry("--stubborn"), "time": time_entry()}
    async with ChildPool(servers) as pool:
        await pool.wait_settled()
        pids = [int(text_of(await pool[name].call("pid", {}))) for name in ("plain", "stubborn")]
        assert all(pid_alive(pid) for pid in pids)
    assert not any(pid_alive(pid) for pid in pids)


async def test_a_disabled_child_is_never_started() -> None:
    async with ChildPool({"off": fault_entry(disabled=True)}) as pool:
        await pool.wait_settled()
        assert pool["off"].status.state == "disabled"
        with pytest.raises(ChildUnavailable, match="disabled"):
            await pool["off"].call("echo", {"text": "x"})


async def test_cancelling_a_call_cancels_it_in_the_child() -> None:
    async with ChildPool({"every": everything_entry()}) as pool:
        await pool.wait_settled()
        child: ChildServer = pool["every"]
        with anyio.move_on_after(0.5) as scope:
            await child.call("trigger-long-running-operation", {"duration": 30, "steps": 30})
        assert scope.cancelled_caught
        # The connection is still good after the cancel.
        assert "ok" in text_of(await child.call("echo", {"message": "ok"}))


async def test_an_http_child_that_dies_fails_fast_and_is_retried() -> None:
    changes = Changes()
    with everything_over_http() as (url, proc):
        async with ChildPool({"web": ServerEntry(url=url)}, on_change=changes) as pool:
            child = pool["web"]
            await changes.until(lambda: child.status.state == "ready")
            proc.kill()
            proc.wait()
            with pytest.raises((ChildDied, ChildUnavailable)):
                await child.call("echo", {"message": "anyone?"})
            await changes.until(lambda: child.status.state == "restarting" and child.status.attempt >= 2)
            assert "cannot reach" in (child.status.error or "")


async def test_a_stuck_child_is_restarted_after_a_timeout() -> None:
    """A child that is alive but answers nothing (stopped): the call times out, a probe fails, it is restarted."""
    changes = Changes()
    async with ChildPool({"f": fault_entry(timeout=0.5)}, on_change=changes) as pool:
        child = pool["f"]
        await changes.until(lambda: child.status.state == "ready")
        pid = int(text_of(await child.call("pid", {})))
        os.kill(pid, signal.SIGSTOP)
        try:
            with pytest.raises(ChildTimeout):
                await child.call("echo", {"text": "anyone?"})
            await changes.until(lambda: child.status.state == "restarting")
            assert "timed out and stopped answering" in (child.status.error or "")
            await changes.until(lambda: child.status.state == "ready")
            assert int(text_of(await child.call("pid", {}))) != pid
        finally:
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)


async def test_a_result_that_breaks_its_schema_is_a_one_line_error() -> None:
    async with ChildPool({"f": fault_entry()}) as pool:
        await pool.wait_settled()
        with pytest.raises(ChildProtocolError) as caught:
            await pool["f"].call("lying", {})
    assert str(caught.value).startswith("f: lying failed: ")
    assert "\n" not in str(caught.value)
    # and the child is still fine
    assert pool["f"].status.restarts == 0


async def test_a_denied_tool_is_not_called() -> None:
    async with ChildPool({"f": fault_entry(tools=ToolFilter(deny=("crash",)))}) as pool:
        await pool.wait_settled()
        with pytest.raises(ChildUnavailable, match="crash is not offered"):
            await pool["f"].call("crash", {})


class Asker:
    def __init__(self) -> None:
        self.asked: list[str] = []

    async def elicit(self, params: Any) -> Any:
        self.asked.append(params.message)
        return t.ElicitResult(action="accept", content={"name": "Ada"})

    async def sample(self, params: Any) -> Any:
        raise AssertionError("not used")


async def test_a_childs_question_goes_to_its_caller_and_never_to_another() -> None:
    async with ChildPool({"every": everything_entry()}) as pool:
        await pool.wait_settled()
        child = pool["every"]
        alone = Asker()
        answered = await child.call("trigger-elicitation-request", {}, questions=alone)
        assert alone.asked and '"name": "Ada"' in text_of(answered)
        # Now a call of another caller is in flight: whose question is it? Nobody is asked; the child is declined.
        other, mine = Asker(), Asker()
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                lambda: child.call("trigger-long-running-operation", {"duration": 1, "steps": 1}, questions=other)
            )
            declined = await child.call("trigger-elicitation-request", {}, questions=mine)
        assert (other.asked, mine.asked) == ([], [])
        assert '"action": "decline"' in text_of(declined)
