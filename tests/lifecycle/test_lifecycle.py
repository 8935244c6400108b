"""Process lifecycle as a host meets it, through real subprocesses: `meta-agent serve` on stdio stopped by SIGTERM or
SIGINT while the host keeps its stdin open (idle, mid-tool, mid-model) or by its stdin closing; `meta-agent run` and
`meta-agent check`; a child whose own process dies while its family lives on. Every child is a family of processes
(tests/fixtures/family.py), and once meta-agent is done no process of any family may be left, found by the marker in
its command line whatever became of its parent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream
from conftest import ProgressLog, check_children, free_port, openai_env, processes_with
from fake_llm import FakeLLM, openai_reply
from family import entry
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from meta_agent.children.pool import ChildPool
from meta_agent.children.stdio import running_children, stdio_child
from meta_agent.config.servers import ServerEntry

pytestmark = pytest.mark.anyio

META_AGENT = [sys.executable, "-m", "meta_agent"]
MODEL = "openai:fake-model"
# Generous for a loaded 2-core machine: a stop takes its grace periods (seconds), a start well under one.
BOUND = 30.0
# A process killed with SIGKILL dies a moment after the signal; how long a check for it may look again.
DYING = 5.0
POLL = 0.01
LINE_MAX = 1 << 20


@pytest.fixture
def marker() -> str:
    return f"marker-{uuid.uuid4().hex}"


def families(marker: str, *kinds: str) -> dict[str, Any]:
    """A servers.json map with one family of each kind, named after its kind; each marked with `marker`."""
    return {kind: entry(kind, f"{marker}-{kind}") for kind in kinds}


def write_config(tmp_path: Path, servers: dict[str, Any]) -> Path:
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


async def until(what: str, predicate: Any, timeout: float = BOUND) -> None:
    try:
        with anyio.fail_after(timeout):
            while not predicate():
                await anyio.sleep(POLL)
    except TimeoutError:
        raise TimeoutError(f"waited {timeout:g} s for {what}") from None


async def all_gone(marker: str) -> None:
    """Every process of the families marked `marker` has died (or is a zombie nobody has reaped yet)."""
    await until(f"the processes {processes_with(marker)} to die", lambda: not processes_with(marker), DYING)


# -- meta-agent serve on stdio, the host keeping stdin open ----------------------------------------------------------


class Served:
    """A `meta-agent serve` process: its exit code (bounded) and what it wrote to stderr."""

    def __init__(self, process: Process, log: Path) -> None:
        self.process = process
        self.log = log

    async def exit_code(self) -> int:
        try:
            with anyio.fail_after(BOUND):
                return await self.process.wait()
        except TimeoutError:
            raise TimeoutError(f"meta-agent did not exit within {BOUND:g} s") from None

    def stderr(self) -> str:
        return self.log.read_text()


class Host(Served):
    """A host of `meta-agent serve` on stdio that writes and reads JSON-RPC lines itself and never closes stdin
    unless told to."""

    def __init__(self, process: Process, log: Path) -> None:
        super().__init__(process, log)
        assert process.stdout is not None
        self._stdout = BufferedByteReceiveStream(process.stdout)
        self._next_id = 0

    async def send(self, method: str, params: dict[str, Any], *, request: bool = True) -> int:
        self._next_id += 1
        message = {"jsonrpc": "2.0", "method": method, "params": params} | ({"id": self._next_id} if request else {})
        assert self.process.stdin is not None
        await self.process.stdin.send((json.dumps(message) + "\n").encode())
        return self._next_id

    async def receive_until(self, what: str, predicate: Any) -> dict[str, Any]:
        """The first message from meta-agent that `predicate` accepts."""
        try:
            with anyio.fail_after(BOUND):
                while not predicate(message := json.loads(await self._stdout.receive_until(b"\n", LINE_MAX))):
                    pass
                return message
        except TimeoutError:
            raise TimeoutError(f"waited {BOUND:g} s for {what}") from None

    async def rest(self) -> str:
        """Whatever meta-agent wrote to stdout that has not been read, once it has exited."""
        rest = bytearray()
        with suppress(anyio.EndOfStream, anyio.BrokenResourceError):
            while True:
                rest += await self._stdout.receive()
        return rest.decode()

    async def handshake(self) -> None:
        hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "host", "version": "1"}}
        request = await self.send("initialize", hello)
        await self.receive_until("the initialize result", lambda m: m.get("id") == request)
        await self.send("notifications/initialized", {}, request=False)

    async def progress(self, text: str) -> None:
        """Wait for a progress message containing `text`."""

        def wanted(message: dict[str, Any]) -> bool:
            return message.get("method") == "notifications/progress" and text in message["params"]["message"]

        await self.receive_until(f"progress {text!r}", wanted)


@asynccontextmanager
async def started(
    tmp_path: Path, servers: dict[str, Any], environ: dict[str, str], *options: str, stdio: bool
) -> AsyncIterator[tuple[Process, Path]]:
    """`meta-agent serve OPTIONS` with `servers` as a process (its stdin and stdout piped for `stdio`) and the file
    its stderr goes to; killed and reaped when left, if it is still there."""
    log = tmp_path / "stderr.log"
    command = [*META_AGENT, "serve", *options, "--config", str(write_config(tmp_path, servers))]
    pipes = (subprocess.PIPE, subprocess.PIPE) if stdio else (None, subprocess.DEVNULL)
    with log.open("w") as errors:
        process = await anyio.open_process(command, stdin=pipes[0], stdout=pipes[1], stderr=errors, env=environ)
    try:
        yield process, log
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.aclose()


@asynccontextmanager
async def serving(tmp_path: Path, servers: dict[str, Any], environ: dict[str, str]) -> AsyncIterator[Host]:
    """`meta-agent serve` on stdio with `servers`, handshake done; its stdin stays open until it has exited."""
    async with started(tmp_path, servers, environ, stdio=True) as (process, log):
        host = Host(process, log)
        await host.handshake()
        yield host


async def agent(host: Host, task: str) -> None:
    await host.send("tools/call", {"name": "agent", "arguments": {"task": task}, "_meta": {"progressToken": "p"}})


@pytest.mark.parametrize("moment", ["idle", "mid_tool", "mid_model"])
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
async def test_serve_stops_on_a_signal_while_the_host_keeps_stdin_open(
    tmp_path: Path, marker: str, llm: FakeLLM, moment: str, signum: int, code: int
) -> None:
    # A forker's sleeper ignores its stdin closing, so stopping it always takes the grace period: one moment is enough.
    kinds = ("shell", "launcher", "forker") if moment == "idle" else ("shell", "launcher")
    async with serving(tmp_path, families(marker, *kinds), openai_env(llm, model=MODEL, base=os.environ)) as host:
        await until("every family to start", lambda: len(processes_with(marker)) == 2 * len(kinds))
        if moment == "mid_tool":  # the server of the launcher family freezes: it cannot even see its stdin close
            llm.reply(openai_reply(None, ("c1", "launcher__freeze", {})))
            await agent(host, "freeze")
            await host.progress("call launcher.freeze")
        elif moment == "mid_model":
            llm.reply(openai_reply("too late"), delay=600)
            await agent(host, "think")
            await until("the model request", lambda: len(llm.requests) == 1)
        host.process.send_signal(signum)
        assert await host.exit_code() == code
        assert processes_with(marker) == []  # every family was ended before meta-agent exited
        stderr = host.stderr()
        assert stderr.splitlines()[-1] == f"meta-agent: stopped by {signal.Signals(signum).name}"
        assert "Traceback" not in stderr


# `meta-agent ARGS` as a parent may start it: with the signals that stop it blocked and ignored, which both pass across
# exec (a script's background job has SIGINT ignored; a supervisor that forks from a thread blocking signals hands on
# that mask). Blocked, a signal sent to it waited forever, and a supervisor's SIGKILL after it left every family behind.
DEAF = (
    "import os, signal, sys; stops = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}; "
    "signal.pthread_sigmask(signal.SIG_BLOCK, stops); [signal.signal(s, signal.SIG_IGN) for s in stops]; "
    "os.execv(sys.executable, [sys.executable, '-m', 'meta_agent', *sys.argv[1:]])"
)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
async def test_serve_started_with_its_stop_signals_blocked_and_ignored_still_stops_on_them(
    tmp_path: Path, marker: str, llm: FakeLLM, signum: int, code: int
) -> None:
    config = write_config(tmp_path, families(marker, "shell", "launcher"))
    command = [sys.executable, "-c", DEAF, "serve", "--config", str(config)]
    environ = openai_env(llm, model=MODEL, base=os.environ)
    with (tmp_path / "stderr.log").open("w") as errors:
        process = await anyio.open_process(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, env=environ
        )
    async with process:
        host = Host(process, tmp_path / "stderr.log")
        try:
            await host.handshake()
            await until("every family to start", lambda: len(processes_with(marker)) == 4)
            process.send_signal(signum)
            assert await host.exit_code() == code
        finally:
            with suppress(ProcessLookupError):
                process.kill()  # a process still deaf to the signal: not left behind
        assert processes_with(marker) == []  # every family was ended before meta-agent exited
        assert host.stderr().splitlines()[-1] == f"meta-agent: stopped by {signal.Signals(signum).name}"


async def test_a_stop_signal_that_came_while_blocked_stops_serve_as_it_is_unblocked(
    tmp_path: Path, marker: str, llm: FakeLLM
) -> None:
    """A SIGTERM pending since before exec (blocked, not ignored: an ignored one is discarded) is received once the
    signal is caught, not acted on by its default action, which would kill us with every family left running."""
    config = write_config(tmp_path, families(marker, "shell"))
    pending = DEAF.replace("[signal.signal(s, signal.SIG_IGN) for s in stops]", "os.kill(os.getpid(), signal.SIGTERM)")
    environ = openai_env(llm, model=MODEL, base=os.environ)
    with (tmp_path / "stderr.log").open("w") as errors:
        process = await anyio.open_process(
            [sys.executable, "-c", pending, "serve", "--config", str(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            env=environ,
        )
    async with process:
        served = Served(process, tmp_path / "stderr.log")
        assert await served.exit_code() == 143
        assert served.stderr().splitlines()[-1] == "meta-agent: stopped by SIGTERM"
    await all_gone(marker)


async def test_serve_ends_every_family_when_stdin_closes(tmp_path: Path, marker: str, llm: FakeLLM) -> None:
    servers = families(marker, "shell", "launcher", "forker")
    async with serving(tmp_path, servers, openai_env(llm, model=MODEL, base=os.environ)) as host:
        await until("every family to start", lambda: len(processes_with(marker)) == 6)
        assert host.process.stdin is not None
        await host.process.stdin.aclose()
        assert await host.exit_code() == 0
        assert processes_with(marker) == []


# `serve` with the bound on holding its children lifted: they start only once released.
UNBOUNDED_HOLD = "import sys, meta_agent.children.pool as pool; pool.HOLD_AT_MOST = 600.0; sys.argv[0] = 'meta-agent'; "
UNBOUNDED_HOLD += "from meta_agent.cli.main import entry; entry()"


async def test_serve_starts_its_children_once_the_host_has_its_first_answer(
    tmp_path: Path, marker: str, llm: FakeLLM
) -> None:
    """On stdio the children start after the answer to the host's first request beyond its handshake (tools/list
    here) has been written, so that their processes starting do not compete with that answer for the CPU."""
    config = write_config(tmp_path, families(marker, "shell"))
    command = [sys.executable, "-c", UNBOUNDED_HOLD, "serve", "--config", str(config)]
    environ = openai_env(llm, model=MODEL, base=os.environ)
    with (tmp_path / "stderr.log").open("w") as errors:
        process = await anyio.open_process(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, env=environ
        )
    async with process:
        host = Host(process, tmp_path / "stderr.log")
        await host.handshake()
        ping = await host.send("ping", {})
        await host.receive_until("the ping's answer", lambda m: m.get("id") == ping)
        assert processes_with(marker) == []  # the handshake and a ping are not a first answer
        assert process.stdin is not None  # ids that are no JSON-RPC id, and a line too deep to read, change nothing
        await process.stdin.send(b'{"jsonrpc": "2.0", "id": [1], "method": "tools/list"}\n' + b"[" * 100_000 + b"\n")
        listed = await host.send("tools/list", {})
        answer = await host.receive_until("the tools list", lambda m: m.get("id") == listed)
        assert {tool["name"] for tool in answer["result"]["tools"]} >= {"ask", "plan", "agent"}
        await until("the family to start", lambda: len(processes_with(marker)) == 2)
        assert process.stdin is not None
        await process.stdin.aclose()
        assert await host.exit_code() == 0
    await all_gone(marker)


async def test_serve_starts_its_children_within_a_second_if_the_host_asks_nothing(
    tmp_path: Path, marker: str, llm: FakeLLM
) -> None:
    """A host that does its handshake and then asks nothing still finds the children started (the hold is bounded)."""
    async with serving(tmp_path, families(marker, "shell"), openai_env(llm, model=MODEL, base=os.environ)) as host:
        await until("the family to start", lambda: len(processes_with(marker)) == 2)
        assert host.process.stdin is not None
        await host.process.stdin.aclose()
        assert await host.exit_code() == 0
    await all_gone(marker)


@pytest.mark.parametrize("fd", [0, 1])
def test_serve_started_with_stdin_or_stdout_closed_says_so(tmp_path: Path, fd: int) -> None:
    """Nobody can talk to it: it says so in one line and exits 0."""
    closing = f'exec "$@" {fd}{"<" if fd == 0 else ">"}&-'
    command = ["sh", "-c", closing, "sh", *META_AGENT, "serve", "--config", str(write_config(tmp_path, {}))]
    done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=BOUND)
    assert done.returncode == 0, done.stderr
    (line,) = done.stderr.splitlines()
    assert json.loads(line)["detail"] == f"fd {fd} was closed at start; nothing to serve"


async def test_serve_started_with_stderr_closed_serves(tmp_path: Path) -> None:
    """Its log and its notes go nowhere, never to stdout; the host is served, and a signal still stops it."""
    command = ["sh", "-c", 'exec "$@" 2>&-', "sh", *META_AGENT, "serve", "--config", str(write_config(tmp_path, {}))]
    process = await anyio.open_process(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None)
    async with process:
        host = Host(process, tmp_path / "no.log")
        await host.handshake()
        listed = await host.send("tools/list", {})
        answer = await host.receive_until("the tools list", lambda m: m.get("id") == listed)
        assert {tool["name"] for tool in answer["result"]["tools"]} >= {"ask", "plan", "agent"}
        process.send_signal(signal.SIGTERM)  # its note "stopped by SIGTERM" would go to stdout if anything did
        assert await host.exit_code() == 143
        rest = await host.rest()
        assert all(json.loads(line)["jsonrpc"] == "2.0" for line in rest.splitlines()), rest


async def test_a_second_signal_says_which_children_are_still_stopping(
    tmp_path: Path, marker: str, llm: FakeLLM
) -> None:
    servers = families(marker, "stubborn")  # its sleeper ignores SIGTERM: stopping it takes both grace periods
    async with serving(tmp_path, servers, openai_env(llm, model=MODEL, base=os.environ)) as host:
        await until("the family to start", lambda: len(processes_with(marker)) == 2)
        host.process.send_signal(signal.SIGTERM)
        await until("the stop to reach SIGTERM", lambda: '"child_group_signalled"' in host.stderr())
        host.process.send_signal(signal.SIGTERM)
        assert await host.exit_code() == 143
        await all_gone(marker)
        lines = host.stderr().splitlines()
        assert "meta-agent: still stopping 1 child server: stubborn" in lines
        assert lines[-1] == "meta-agent: stopped by SIGTERM"


# -- meta-agent serve over HTTP -------------------------------------------------------------------------------------


class HttpServe(Served):
    """`meta-agent serve --transport http` as a process: its /mcp URL, exit code and stderr."""

    def __init__(self, process: Process, log: Path, url: str) -> None:
        super().__init__(process, log)
        self.url = url


@asynccontextmanager
async def serving_http(tmp_path: Path, servers: dict[str, Any], environ: dict[str, str]) -> AsyncIterator[HttpServe]:
    """`meta-agent serve --transport http` with `servers`, once it listens."""
    port = free_port()
    options = ("--transport", "http", "--port", str(port))
    async with started(tmp_path, servers, environ, *options, stdio=False) as (process, log):
        served = HttpServe(process, log, f"http://127.0.0.1:{port}/mcp")

        def listening() -> bool:
            return '"serving_http"' in served.stderr() or process.returncode is not None

        await until("the server to listen", listening)
        assert process.returncode is None, served.stderr()
        yield served


async def call_until_cut_off(url: str, progress: ProgressLog) -> None:
    """An agent call over HTTP (2025-11-25) that runs until the server stops under it."""
    with suppress(Exception):  # the server goes away mid-call, as the test means it to
        async with (
            httpx2.AsyncClient(timeout=httpx2.Timeout(BOUND, read=None)) as http,
            Client(streamable_http_client(url, http_client=http), mode="legacy") as client,
        ):
            await client.call_tool("agent", {"task": "freeze"}, progress_callback=progress)


@pytest.mark.parametrize("moment", ["idle", "mid_call"])
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
async def test_serve_http_stops_on_a_signal_after_its_children(
    tmp_path: Path, marker: str, llm: FakeLLM, moment: str, signum: int, code: int
) -> None:
    """uvicorn no longer handles the signal itself: no KeyboardInterrupt traceback, no death by the signal raised
    again, but our exit code and last line, once every family is gone, also with a caller mid-call."""
    kinds = ("shell", "launcher")
    environ = openai_env(llm, model=MODEL, base=os.environ)
    async with serving_http(tmp_path, families(marker, *kinds), environ) as host:
        await until("every family to start", lambda: len(processes_with(marker)) == 2 * len(kinds))
        async with anyio.create_task_group() as tg:
            if moment == "mid_call":  # the launcher's server freezes mid-call: the stop cannot wait for an answer
                llm.reply(openai_reply(None, ("c1", "launcher__freeze", {})))
                progress = ProgressLog()
                tg.start_soon(call_until_cut_off, host.url, progress)
                await progress.until("call launcher.freeze", BOUND)
            host.process.send_signal(signum)
            assert await host.exit_code() == code
            tg.cancel_scope.cancel()
        assert processes_with(marker) == []  # every family was ended before meta-agent exited
        stderr = host.stderr()
        assert stderr.splitlines()[-1] == f"meta-agent: stopped by {signal.Signals(signum).name}"
        assert "Traceback" not in stderr


async def test_serve_http_a_second_sigint_does_not_skip_stopping_the_children(
    tmp_path: Path, marker: str, llm: FakeLLM
) -> None:
    """uvicorn took a second SIGINT as "force exit", skipping the lifespan shutdown where the children stop."""
    environ = openai_env(llm, model=MODEL, base=os.environ)
    async with serving_http(tmp_path, families(marker, "stubborn"), environ) as host:
        await until("the family to start", lambda: len(processes_with(marker)) == 2)
        host.process.send_signal(signal.SIGINT)
        await until("the stop to reach SIGTERM", lambda: '"child_group_signalled"' in host.stderr())
        host.process.send_signal(signal.SIGINT)
        assert await host.exit_code() == 130
        await all_gone(marker)
        lines = host.stderr().splitlines()
        assert "meta-agent: still stopping 1 child server: stubborn" in lines
        assert lines[-1] == "meta-agent: stopped by SIGINT"
        assert "Traceback" not in host.stderr()


# -- meta-agent run and check ----------------------------------------------------------------------------------------


def test_run_leaves_no_family_behind(tmp_path: Path, marker: str, llm: FakeLLM) -> None:
    config = write_config(tmp_path, families(marker, "launcher", "forker"))
    llm.reply(openai_reply(None, ("c1", "forker__pid", {})))
    llm.reply(openai_reply("done"))
    result = subprocess.run(
        [*META_AGENT, "run", "what is your pid", "--config", str(config)],
        check=False,
        capture_output=True,
        text=True,
        timeout=BOUND * 3,
        env=openai_env(llm, model=MODEL, base=os.environ),
    )
    assert (result.returncode, result.stdout) == (0, "done\n"), result.stderr
    assert processes_with(marker) == []


async def test_where_no_signal_can_be_caught_ctrl_c_still_ends_every_family(
    tmp_path: Path, marker: str, llm: FakeLLM
) -> None:
    """Windows has no signal receiver for an event loop: a Ctrl-C comes as KeyboardInterrupt. Emulated here by running
    `meta-agent run` with no signals to catch; the run unwinds, the families go, and the exit is still SIGINT's."""
    config = write_config(tmp_path, families(marker, "shell", "launcher"))
    # The reply and the wait are this run's own (its task is unique): a request of another process at the same
    # endpoint must not pass for this run's, which would be signalled before it had reached its model request.
    mine = f"think {uuid.uuid4().hex}"  # not the marker: processes_with(marker) counts the families' processes only
    llm.reply(openai_reply("too late"), delay=600, match=mine)
    # Ctrl-C as Windows gives it: KeyboardInterrupt, set here, with SIGINT unblocked. Windows hands neither a signal's
    # disposition nor a signal mask across a process start; POSIX hands on both: where pytest itself was started with
    # SIGINT ignored (a background job of a script, as a non-interactive shell starts one), Python installs no
    # KeyboardInterrupt handler in this process, and the run never heard the signal (on POSIX proper meta-agent
    # catches it all the same: test_serve_started_with_its_stop_signals_blocked_and_ignored_still_stops_on_them).
    code = (
        "import signal, sys, meta_agent.cli.main as m; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}); m.SIGNALS = (); sys.exit(m.main(sys.argv[1:]))"
    )
    process = await anyio.open_process(
        [sys.executable, "-c", code, "run", mine, "--config", str(config)],
        env=openai_env(llm, model=MODEL, base=os.environ),
    )
    try:
        await until("the model request", lambda: any(mine in json.dumps(r.body) for r in llm.requests))
        assert len(processes_with(marker)) == 4  # both families are up
        process.send_signal(signal.SIGINT)
        with anyio.fail_after(BOUND):
            await process.wait()
        assert process.returncode == 130
        assert processes_with(marker) == []
        assert process.stderr is not None
        stderr = (await process.stderr.receive(LINE_MAX)).decode()
        assert stderr.splitlines()[-1] == "meta-agent: stopped by SIGINT"
        assert "Traceback" not in stderr
    finally:
        with suppress(ProcessLookupError):
            process.kill()
        await process.aclose()


def test_check_leaves_no_family_behind(tmp_path: Path, marker: str) -> None:
    config = write_config(tmp_path, families(marker, "shell", "launcher", "forker"))
    command = [*META_AGENT, "check", "--config", str(config)]
    result = subprocess.run(command, check=False, capture_output=True, text=True, timeout=BOUND * 3)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [line.split()[:2] for line in check_children(result.stdout)] == [
        [kind, "ready"] for kind in ("shell", "launcher", "forker")
    ]
    assert processes_with(marker) == []


# -- a child's own process dies, its family lives on ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["shell", "launcher", "forker"])
async def test_a_child_whose_own_process_dies_is_restarted_without_its_old_family(marker: str, kind: str) -> None:
    """The server of a shell or launcher family outlives its killed parent and would go on answering over the pipes
    it holds; a forker's sleeper holds them after the server died. Either way the child counts as dead, and its
    whole family goes before the new one starts."""
    async with ChildPool({kind: ServerEntry(**entry(kind, marker))}) as pool:
        await pool.wait_settled()
        child = pool[kind]
        server = int((await child.call("pid", {})).content[0].text)  # type: ignore[union-attr]
        old_family = processes_with(marker)
        assert len(old_family) == 2
        os.kill(os.getpgid(server), signal.SIGKILL)  # the group's leader: the child's own process
        await until(f"{kind} to come back", lambda: child.status.state == "ready" and child.status.restarts == 1)
        assert not set(old_family) & set(processes_with(marker))
        assert int((await child.call("pid", {})).content[0].text) != server  # type: ignore[union-attr]
    await all_gone(marker)


# -- a start cut short --------------------------------------------------------------------------------------------


class _CancelWhileSpawning:
    """An errlog: the spawn asks for its file number between the fork and the event loop hearing of the process,
    and that is when this cancels the scope (as a failing provider does while the children start)."""

    def __init__(self, scope: anyio.CancelScope) -> None:
        self.scope = scope

    def fileno(self) -> int:
        self.scope.cancel()
        return sys.stderr.fileno()


async def test_a_start_cancelled_half_way_still_stops_the_child_the_usual_way(tmp_path: Path) -> None:
    """A spawn cut short left a process that asyncio killed but did not reap (its waiter thread later called into a
    closed event loop) and whose group nobody ended; the child now hears its stdin close, like every other stop."""
    said = tmp_path / "said"
    script = "import pathlib, sys; sys.stdin.read(); pathlib.Path(sys.argv[1]).write_text('stdin closed')"
    params = StdioServerParameters(command=sys.executable, args=["-c", script, str(said)])
    with anyio.CancelScope() as scope:
        async with stdio_child("c", params, _CancelWhileSpawning(scope)):  # type: ignore[arg-type]
            await anyio.sleep_forever()
    assert scope.cancelled_caught
    assert said.read_text() == "stdin closed"
    assert running_children() == []
