"""Shared test fixtures: real child servers (our fault server, mcp-server-time, server-everything)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from app_browser import browser, browser_ready  # noqa: F401  (the Chromium the app tests drive)
from postgres_cluster import database_url, pg_cluster  # noqa: F401  (fixtures for every test module)
from quick_tier import (  # noqa: F401  (the quick tier's option and its check that no test of it starts a process)
    keep_the_quick_tier,
    only_quick,
    pytest_addoption,
    pytest_configure,
    pytest_runtest_call,
    pytest_runtest_setup,
    pytest_runtest_teardown,
)

from meta_agent.config.servers import ServerEntry
from meta_agent.core.policy import TrustLevel
from meta_agent.core.tools import ToolHints, ToolSpec

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS / "fixtures"))  # fake_llm, fault_server
FAULT_SERVER = TESTS / "fixtures" / "fault_server.py"
EVERYTHING = TESTS / "node_modules" / ".bin" / "mcp-server-everything"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    """asyncio, for a whole module: a module-scoped async fixture (one server for a module's tests) needs it."""
    return "asyncio"


def fault_entry(*flags: str, **extra: Any) -> ServerEntry:
    """A stdio entry for our fault server, run by this interpreter."""
    return ServerEntry(command=sys.executable, args=(str(FAULT_SERVER), *flags), **extra)


# mcp-server-time is installed with the test extras; run it by module so no PATH shim is needed.
TIME_COMMAND = {"command": sys.executable, "args": ["-m", "mcp_server_time"]}


def tool_spec(schema: Mapping[str, Any]) -> ToolSpec:
    """A child's tool `h.t` with `schema` as its input schema, for checks of arguments on their own."""
    return ToolSpec(
        name="h.t",
        alias="h__t",
        server="h",
        tool="t",
        description="",
        input_schema=schema,
        output_schema=None,
        hints=ToolHints(),
        trust="always",
        trust_source="default",
    )


def named_tool(
    name: str, description: str = "", properties: dict[str, Any] | None = None, trust: TrustLevel = "ask"
) -> ToolSpec:
    """The tool `name` (`server.tool`, or an internal tool's bare name) as the toolbox holds it, for the tests of
    what is offered or told about tools by their names."""
    server, _, tool = name.rpartition(".")
    return ToolSpec(
        name=name,
        alias=name.replace(".", "__"),
        server=server or None,
        tool=tool,
        description=description,
        input_schema={"type": "object", "properties": properties or {}},
        output_schema=None,
        hints=ToolHints(),
        trust=trust,
        trust_source="test",
    )


def time_entry(**extra: Any) -> ServerEntry:
    return ServerEntry(command=sys.executable, args=("-m", "mcp_server_time"), **extra)


def everything_entry(**extra: Any) -> ServerEntry:
    assert EVERYTHING.exists() or only_quick(), "server-everything is not installed; run the README's test command"
    return ServerEntry(command="node", args=(str(EVERYTHING), "stdio"), **extra)


def check_children(stdout: str) -> list[str]:
    """The lines of `meta-agent check` between its servers.json line and its model's: one per child or webhook."""
    lines = stdout.splitlines()[1:]
    return lines[: next((n for n, line in enumerate(lines) if line.startswith("META_AGENT_MODEL")), len(lines))]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def everything_over_http() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """server-everything over streamable HTTP on a free port: its /mcp URL and its process."""
    assert EVERYTHING.exists(), "server-everything is not installed; run the README's test command"
    port = free_port()
    proc = subprocess.Popen(
        ["node", str(EVERYTHING), "streamableHttp"],
        env={**os.environ, "PORT": str(port)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    try:
        for line in proc.stdout:  # blocks until the server says it listens (or exits)
            if "listening on port" in line:
                break
        else:
            raise RuntimeError(f"server-everything exited with {proc.wait()}")
        yield f"http://127.0.0.1:{port}/mcp", proc
    finally:
        proc.kill()
        proc.wait(timeout=10)
        proc.stdout.close()


@pytest.fixture(scope="session")
def everything_http() -> Iterator[str]:
    with everything_over_http() as (url, _proc):
        yield url


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is dead for our purposes once its parent reaps it.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


class Changes:
    """An `on_change` callback for children that lets a test wait for a condition without sleeping."""

    def __init__(self) -> None:
        import anyio

        self._anyio = anyio
        self._event = anyio.Event()

    def __call__(self, _child: object) -> None:
        event, self._event = self._event, self._anyio.Event()
        event.set()

    async def until(self, predicate: Any, timeout: float = 30) -> None:
        with self._anyio.fail_after(timeout):
            while not predicate():
                await self._event.wait()


def openai_env(
    llm: Any, *, model: str | None = None, base: Mapping[str, str] | None = None, **extra: str
) -> dict[str, str]:
    """An environment whose OpenAI settings point at a FakeLLM; `model` also sets META_AGENT_MODEL."""
    chosen = {"META_AGENT_MODEL": model} if model else {}
    return {**(base or {}), "OPENAI_BASE_URL": f"{llm.url}/v1", "OPENAI_API_KEY": "sk-test", **chosen, **extra}


def without_otel(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """`environ` without its OTEL_* variables: a test's own telemetry settings, not the machine's."""
    return {key: value for key, value in environ.items() if not key.startswith("OTEL_")}


@asynccontextmanager
async def serving_asgi(make_app: Callable[[str], Any], wait: float = 30.0) -> AsyncIterator[str]:
    """Our HTTP front, which `make_app` makes for its base URL, served in this event loop on a free port of
    127.0.0.1: that URL once /health answers 200; stopped when the block ends."""
    import anyio
    import httpx2

    from meta_agent.front.http.serve import serve_http

    sock = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with anyio.create_task_group() as tg, httpx2.AsyncClient(timeout=wait) as http:
        tg.start_soon(serve_http, make_app(url), [sock])
        with anyio.fail_after(wait):
            while True:
                try:
                    if (await http.get(f"{url}/health")).status_code == 200:
                        break
                except httpx2.ConnectError:
                    pass
                await anyio.sleep(0.05)  # not listening yet
        yield url
        tg.cancel_scope.cancel()


@pytest.fixture(scope="module")
def llm_endpoint() -> Iterator[Any]:
    """One fake model endpoint (a server on a thread) per test module; a module-scoped server points at it."""
    from fake_llm import FakeLLM

    with FakeLLM() as fake:
        yield fake


@pytest.fixture
def llm(llm_endpoint: Any) -> Any:
    """The module's fake model endpoint as each test finds it: no reply queued, no request seen."""
    llm_endpoint.clear()
    llm_endpoint.requests.clear()
    return llm_endpoint


class ProgressLog:
    """A progress callback that records what it hears and lets a test wait for a message."""

    def __init__(self) -> None:
        import anyio

        self._anyio = anyio
        self.seen: list[tuple[float, float | None, str | None]] = []
        self._changed = anyio.Event()

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, total, message))
        self._changed.set()
        self._changed = self._anyio.Event()

    @property
    def messages(self) -> list[str]:
        return [m or "" for _, _, m in self.seen]

    async def until(self, text: str, timeout: float = 30) -> None:
        with self._anyio.fail_after(timeout):
            while not any(text in m for m in self.messages):
                await self._changed.wait()


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """A test that runs a command in this process (`main(["runs"])`) sets logging up as the command does: loggers
    cached on first use, the root's handlers, the process's hooks. Left so, a later test's logger would be cached
    with that chain and never reach the processors the later test configures; so after each test it is put back."""
    import logging

    import structlog

    root = logging.getLogger()
    old = structlog.get_config()
    handlers, level, last_resort = root.handlers[:], root.level, logging.lastResort
    hooks = sys.excepthook, sys.unraisablehook, threading.excepthook
    yield
    if structlog.get_config() != old:
        structlog.configure(**old)
    ours = [h for h in root.handlers if h not in handlers and type(h).__module__ == "meta_agent.records.logs"]
    if ours:  # the command's handler replaced the root's (and pytest's own, which pytest removes itself)
        for handler in ours:
            handler.close()
        root.handlers[:] = handlers
    root.level, logging.lastResort = level, last_resort
    sys.excepthook, sys.unraisablehook, threading.excepthook = hooks
    logging.captureWarnings(False)


@pytest.fixture(autouse=True, scope="session")
def _traces_in_a_temporary_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Runs write traces and conversations; the tests' go to temporary places (subprocesses inherit them)."""
    places = {
        "META_AGENT_TRACE_DIR": str(tmp_path_factory.mktemp("traces")),
        "META_AGENT_CONVERSATIONS_DB": str(tmp_path_factory.mktemp("data") / "conversations.sqlite3"),
    }
    old = {name: os.environ.get(name) for name in places}
    os.environ.update(places)
    yield
    for name, value in old.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The fault suite's summary test checks the counts of every module of the suite (tests/faults/test_faults*.py), so
    it runs after all of them. Under --quick, only the quick tier runs (quick_tier.py)."""
    keep_the_quick_tier(config, items)
    items.sort(key=lambda item: item.name == "test_the_fault_summary")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The fault suite's counts (tests/faults/test_faults*.py), as one line and, where $FAULT_SUMMARY_FILE names a
    file, as JSON there."""
    from fault_tally import TALLY

    if not TALLY.groups:
        return
    terminalreporter.write_line(TALLY.line())
    if path := os.environ.get("FAULT_SUMMARY_FILE"):
        TALLY.write(Path(path))


async def cancel_while_hanging(client: Any) -> ProgressLog:
    """Call `agent` with the task "hang" (the fake model answers with a call of f.hang) and cancel the call once that
    tool call has started; returns the progress the call heard."""
    import anyio

    progress = ProgressLog()
    async with anyio.create_task_group() as tg:

        async def call() -> None:
            await client.call_tool("agent", {"task": "hang"}, progress_callback=progress)

        tg.start_soon(call)
        await progress.until("call f.hang")
        tg.cancel_scope.cancel()
    return progress


class ServerLog:
    """Reads a server's stderr on a thread (so the pipe never fills) and lets a test wait for a line."""

    def __init__(self, stream: Any) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()

    def count(self, text: str) -> int:
        with self._changed:
            return sum(text in line for line in self.lines)

    def wait_for(self, text: str, *, more_than: int = 0, timeout: float = 30) -> None:
        """Block until more than `more_than` lines contain `text`."""
        with self._changed:
            if not self._changed.wait_for(lambda: sum(text in x for x in self.lines) > more_than, timeout):
                raise AssertionError(f"{text!r} not in the server's log")


@contextmanager
def http_serving(config: Path, environ: Mapping[str, str], *args: str) -> Iterator[tuple[str, ServerLog]]:
    """`meta-agent serve --transport http --config CONFIG ARGS` on a free port: its base URL and its log, once it
    listens; stopped by SIGTERM after, which it must answer with exit 143."""
    port = free_port()
    command = [sys.executable, "-m", "meta_agent", "serve", "--transport", "http", "--port", str(port)]
    proc = subprocess.Popen(
        [*command, "--config", str(config), *args],
        env=dict(environ),
        stderr=subprocess.PIPE,
        text=True,
    )
    log = ServerLog(proc.stderr)
    try:
        log.wait_for("serving_http")
        yield f"http://127.0.0.1:{port}", log
    finally:
        proc.terminate()
        code = proc.wait(timeout=30)
        assert proc.stderr is not None
        proc.stderr.close()
        assert code == 128 + signal.SIGTERM, code


def processes_with(marker: str) -> list[int]:
    """Pids of live processes whose command line contains `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().split(") ", 1)[1][0]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(int(entry.name))
    return found
