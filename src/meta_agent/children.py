"""Child MCP servers and their supervision.

One `ChildServer` per `servers.json` entry. Its `supervise()` task is the only task that enters and exits the
child's `mcp.Client` (the SDK requires it), lists the child's tools (every page), and reconnects with a capped
exponential backoff when the child dies. Calls come from other tasks and share the connected client.

A stdio child runs in its own process group, which is ended whole when its connection ends (stdio_child.py), so no
grandchild outlives it. Its stderr is read through a pipe of ours and written to our log line by line, so nothing a
child prints reaches our stdout. The pipe closing is also how a dead stdio child is noticed between calls.
"""

from __future__ import annotations

import fnmatch
import os
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TextIO

import anyio
import httpx2
import mcp.types as t
import pydantic
import structlog
from anyio.abc import TaskStatus
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from meta_agent.config import ServerEntry
from meta_agent.errors import ChildDied, ChildProtocolError, ChildTimeout, ChildUnavailable
from meta_agent.stdio_child import stdio_child
from meta_agent.tools import ProgressFn

log = structlog.get_logger("meta_agent.children")

# npm- and uv-launched servers can take several seconds to boot; longer than this is a child that will not start.
START_TIMEOUT = 30.0
# A start given up at its deadline is recorded at once (the child is stopped after); this is only the moment the
# supervisor takes to get to it, so a wait for a child can never outlast its start timeout by more.
SETTLE_GRACE = 1.0
# The first retry comes quickly (a crash is often a one-off); later ones back off to spare a crash-looping child.
BACKOFF_FIRST = 0.5
BACKOFF_CAP = 30.0
# A connection that stayed up this long was healthy: the next failure starts the backoff over.
STABLE_AFTER = 60.0
# How long a liveness probe may take after a stdio child closed its stderr.
PROBE_TIMEOUT = 5.0
# Stderr lines kept per child, to explain a failed start.
STDERR_TAIL = 20
# A stderr "line" longer than this (a child drawing progress bars without newlines) is logged in pieces.
STDERR_LINE_MAX = 64 * 1024
# `tools/list` pages read at most; a child that pages forever is broken.
MAX_TOOL_PAGES = 1000
# The SDK's default httpx2 timeout is 5 s, which kills any silent long tool call; ours is per call instead.
HTTP_TIMEOUT = httpx2.Timeout(30.0, read=None)

ChildState = Literal["starting", "ready", "restarting", "failed", "disabled"]


class Questions(Protocol):
    """Answers a child's questions during a call by asking our own caller."""

    async def elicit(self, params: t.ElicitRequestFormParams) -> t.ElicitResult: ...

    async def sample(self, params: t.CreateMessageRequestParams) -> Any: ...




@dataclass(frozen=True, kw_only=True)
class ChildStatus:
    """What is known about a child right now; `attempt` counts consecutive failed connections."""

    name: str
    transport: Literal["stdio", "http"]
    state: ChildState
    attempt: int = 0
    restarts: int = 0
    error: str | None = None
    protocol_version: str | None = None
    server_name: str | None = None
    server_version: str | None = None
    start_seconds: float | None = None
    tool_count: int = 0
    retry_in: float | None = None


class ChildServer:
    """One configured child server: its supervisor, its tools and the calls made to it."""

    def __init__(
        self,
        name: str,
        entry: ServerEntry,
        *,
        restart: bool = True,
        start_timeout: float = START_TIMEOUT,
        on_change: Callable[[ChildServer], None] | None = None,
    ) -> None:
        self.name = name
        self.entry = entry
        self.restart = restart
        self.start_timeout = start_timeout
        self.on_change = on_change
        self.settled = anyio.Event()  # set once the first attempt has succeeded or failed
        self.start_deadline: float | None = None  # when the current attempt gives up its start (anyio's clock)
        self._state: ChildState = "disabled" if entry.disabled else "starting"
        self._client: Client | None = None
        self._tools: tuple[t.Tool, ...] = ()
        self._attempt = 0
        self._restarts = 0
        self._error: str | None = None
        self._start_seconds: float | None = None
        self._retry_at: float | None = None
        self._lost = anyio.Event()  # one per connection: set once that connection is over
        self._wake = anyio.Event()  # the supervisor has something to do: a probe, a re-list, or the end
        self._want_probe = ""
        self._want_relist = False
        self._connected_at: float | None = None
        self._identity: tuple[str | None, str | None, str | None] = (None, None, None)
        self._stderr: deque[str] = deque(maxlen=STDERR_TAIL)
        self._bad_output: str | None = None
        self._http_status: int | None = None
        self._in_flight: list[Questions | None] = []  # who can answer for each call in flight (None: nobody)
        if entry.disabled:
            self.settled.set()

    # -- what callers read -------------------------------------------------------------------------------

    @property
    def tools(self) -> tuple[t.Tool, ...]:
        """The child's tools that `tools.allow`/`tools.deny` let through; empty unless ready."""
        return self._tools

    @property
    def status(self) -> ChildStatus:
        protocol, server_name, server_version = self._identity
        retry_in = None
        if self._retry_at is not None:
            retry_in = max(0.0, self._retry_at - time.monotonic())
        return ChildStatus(
            name=self.name,
            transport=self.entry.transport,
            state=self._state,
            attempt=self._attempt,
            restarts=self._restarts,
            error=self._error,
            protocol_version=protocol,
            server_name=server_name,
            server_version=server_version,
            start_seconds=self._start_seconds,
            tool_count=len(self._tools),
            retry_in=retry_in,
        )

    async def call(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        on_progress: ProgressFn | None = None,
        questions: Questions | None = None,
    ) -> t.CallToolResult:
        """Call one of the child's tools (its own name), bounded by the server's `timeout`. If the child asks a
        question during the call (elicitation or sampling), `questions` answers it; without it, the child is declined.

        Raises:
            ChildUnavailable: the child is not connected; nothing was sent.
            ChildDied: the connection closed during the call; a restart is under way.
            ChildTimeout: no answer within `timeout`; the call was cancelled in the child.
            ChildProtocolError: the child answered with a JSON-RPC error or a malformed result.
        """
        client, lost = self._client, self._lost
        if client is None or self._state != "ready":
            raise ChildUnavailable(self.name, self._unavailable_reason())
        if not any(offered.name == tool for offered in self._tools):
            raise ChildUnavailable(self.name, f"{tool} is not offered (not listed, or withheld by tools.allow/deny)")
        timeout = self.entry.timeout
        self._in_flight.append(questions)
        try:
            return await client.call_tool(
                tool, dict(arguments), read_timeout_seconds=timeout, progress_callback=on_progress
            )
        except MCPError as exc:
            if exc.code == t.CONNECTION_CLOSED:
                self._down(f"connection closed during {tool}", lost)
                raise ChildDied(self.name, f"the server's connection closed during {tool}; restarting it") from None
            if exc.code == t.REQUEST_TIMEOUT:
                self._ask_supervisor(probe=f"{tool} timed out")  # a stuck child is restarted, not waited on again
                raise ChildTimeout(self.name, f"{tool} took longer than {timeout:g} s and was cancelled") from None
            raise ChildProtocolError(
                self.name, f"{tool} failed: {_one_line(exc.message)} (JSON-RPC error {exc.code})"
            ) from None
        except pydantic.ValidationError as exc:
            raise ChildProtocolError(self.name, f"{tool} returned a malformed result: {_first_error(exc)}") from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, httpx2.TransportError) as exc:
            self._down(f"connection lost during {tool}: {_describe_exception(exc)}", lost)
            raise ChildDied(self.name, f"the connection was lost during {tool}; restarting it") from None
        except Exception as exc:  # e.g. a result that breaks the tool's own outputSchema: the SDK raises RuntimeError
            raise ChildProtocolError(self.name, f"{tool} failed: {_describe_exception(exc)}") from None
        finally:
            self._in_flight.remove(questions)

    # -- supervision ---------------------------------------------------------------------------------------

    async def supervise(self) -> None:
        """Connect, serve, and reconnect after a failure, until cancelled. Never raises but for cancellation."""
        if self.entry.disabled:
            return
        while True:
            await self._connect_once()
            if not self.restart:
                return
            log.warning("child_down", server=self.name, error=self._error, attempt=self._attempt)
            assert self._retry_at is not None
            await anyio.sleep(max(0.0, self._retry_at - time.monotonic()))
            self._retry_at = None
            self._restarts += 1

    async def _connect_once(self) -> None:
        """One connection's life: returns once it failed to start or was lost (`_down` has run)."""
        self._lost = anyio.Event()
        self._wake = anyio.Event()
        self._want_probe, self._want_relist = "", False
        self._connected_at = None
        self._bad_output = None
        self._http_status = None
        self._stderr.clear()
        started = time.monotonic()
        self.start_deadline = anyio.current_time() + self.start_timeout
        try:
            async with anyio.create_task_group() as tg:
                timer = await tg.start(self._give_up_start, tg.cancel_scope)
                async with self._open() as client:
                    tools = await _list_all_tools(client)
                    timer.cancel()
                    if self._lost.is_set():  # the deadline came as the answer did: the start was given up already
                        return
                    self._connected_at = time.monotonic()
                    self._start_seconds = self._connected_at - started
                    self._client = client
                    self._tools = tuple(tool for tool in tools if self._offered(tool.name))
                    info = client.server_info
                    self._identity = (client.protocol_version, info and info.name, info and info.version)
                    self._error = None
                    self._set_state("ready")
                    self.settled.set()
                    log.info("child_ready", server=self.name, tools=len(self._tools), seconds=self._start_seconds)
                    await self._serve(client)
        except Exception as exc:  # the SDK raises anything from OSError to ExceptionGroup; all end this connection
            self._down(self._describe_failure(exc))
        finally:
            self._client = None
            self._tools = ()

    async def _give_up_start(
        self, starting: anyio.CancelScope, *, task_status: TaskStatus[anyio.CancelScope] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """At the start deadline, record the failed start, then cancel `starting`: stopping the child's processes
        can take seconds more (stdio_child.py), and whoever waits for the child should not wait that out too."""
        with anyio.CancelScope() as timer:
            task_status.started(timer)
            assert self.start_deadline is not None
            await anyio.sleep_until(self.start_deadline)
            self._down(self._start_failure(f"no answer within {self.start_timeout:g} s"))
            starting.cancel()

    async def _serve(self, client: Client) -> None:
        """While connected: probe or re-list when asked, until the connection is lost."""
        lost = self._lost
        while not lost.is_set():
            await self._wake.wait()
            self._wake = anyio.Event()
            if self._want_probe and not lost.is_set():
                why, self._want_probe = self._want_probe, ""
                await self._probe(client, why, lost)
            if self._want_relist and not lost.is_set():
                self._want_relist = False
                await self._relist(client, lost)

    def _ask_supervisor(self, *, probe: str = "", relist: bool = False) -> None:
        self._want_probe = self._want_probe or probe
        self._want_relist = self._want_relist or relist
        self._wake.set()

    def _down(self, reason: str, lost: anyio.Event | None = None) -> None:
        """The connection is over or never came up: fail calls fast from now on and schedule the next attempt.

        `lost` is the event of the connection the failure was seen on; a failure of an older connection is ignored.
        """
        if self._lost.is_set() or (lost is not None and lost is not self._lost):
            return
        self._lost.set()
        self._wake.set()
        self._client = None
        self._tools = ()
        self._error = reason
        if self._connected_at is not None and time.monotonic() - self._connected_at >= STABLE_AFTER:
            self._attempt = 0
        self._attempt += 1
        if self.restart:
            self._retry_at = time.monotonic() + min(BACKOFF_CAP, BACKOFF_FIRST * 2 ** (self._attempt - 1))
        self._set_state("restarting" if self.restart else "failed")
        self.settled.set()

    @asynccontextmanager
    async def _open(self) -> AsyncIterator[Client]:
        entry = self.entry
        if entry.command is not None:
            if entry.cwd is not None and not os.path.isdir(entry.cwd):
                raise _StartFailure(f"cwd {entry.cwd!r} is not a directory")
            # Bytes that are not UTF-8 become U+FFFD: a strict decoder would stall the connection until the child exits.
            params = StdioServerParameters(
                command=entry.command,
                args=list(entry.args),
                env=entry.env,
                cwd=entry.cwd,
                encoding_error_handler="replace",
            )
            async with anyio.create_task_group() as tg:
                with self._stderr_pipe(tg) as errlog:
                    async with self._client_for(stdio_child(self.name, params, errlog)) as client:
                        errlog.close()  # the child has its own copy now; the pipe ends when the child does
                        yield client
                tg.cancel_scope.cancel()
        else:
            assert entry.url is not None
            hooks = {"response": [self._on_http_response]}
            async with httpx2.AsyncClient(headers=entry.headers, timeout=HTTP_TIMEOUT, event_hooks=hooks) as http:
                async with self._client_for(streamable_http_client(entry.url, http_client=http)) as client:
                    yield client

    def _client_for(self, transport: Any) -> Client:
        # The callbacks declare elicitation and sampling, so children offer the tools that ask; we forward the
        # questions to our own caller where it can answer (on 2026-07-28 children the SDK drives the rounds).
        return Client(
            transport,
            cache=None,
            message_handler=self._on_message,
            elicitation_callback=self._on_elicit,
            sampling_callback=self._on_sample,
        )

    async def _on_elicit(self, _ctx: Any, params: Any) -> t.ElicitResult:
        """A child asks our user something during a call: forward it to the caller of the latest call, or decline."""
        asker = self._asker()
        if asker is None or not isinstance(params, t.ElicitRequestFormParams):
            log.info("child_question_declined", server=self.name, why="nobody to ask" if asker is None else "url mode")
            return t.ElicitResult(action="decline")
        try:
            return await asker.elicit(params)
        except Exception as exc:  # whatever went wrong asking, the child gets a clean decline
            log.warning("child_question_failed", server=self.name, error=_describe_exception(exc))
            return t.ElicitResult(action="decline")

    def _asker(self) -> Questions | None:
        """Who can answer a question the child asks now. The protocol does not say which of our calls it belongs
        to, so with calls of different callers in flight nobody is asked: a question must not reach the wrong user."""
        callers = {id(q): q for q in self._in_flight}
        return next(iter(callers.values())) if len(callers) == 1 else None

    async def _on_sample(self, _ctx: Any, params: t.CreateMessageRequestParams) -> Any:
        """A child asks for a model completion during a call: forward it to our caller's model, or refuse."""
        asker = self._asker()
        try:
            if asker is None:
                raise ChildUnavailable(self.name, "nobody to ask")
            return await asker.sample(params)
        except Exception as exc:  # the child gets an error it can read, never a hang
            return t.ErrorData(code=t.INVALID_REQUEST, message=f"meta-agent's caller cannot sample: {exc}")

    @contextmanager
    def _stderr_pipe(self, tg: anyio.abc.TaskGroup) -> Iterator[TextIO]:
        """A file for the child's stderr; a task logs each line and notices when the child closes it."""
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        tg.start_soon(self._pump_stderr, read_fd)
        with os.fdopen(write_fd, "w") as writer:
            yield writer

    async def _pump_stderr(self, read_fd: int) -> None:
        pending = b""
        try:
            while True:
                await anyio.wait_readable(read_fd)
                try:
                    chunk = os.read(read_fd, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    break
                *lines, pending = (pending + chunk).replace(b"\r", b"\n").split(b"\n")
                if len(pending) > STDERR_LINE_MAX:
                    lines.append(pending)
                    pending = b""
                for line in lines:
                    self._log_stderr(line)
        finally:
            os.close(read_fd)
        if pending:
            self._log_stderr(pending)
        if self._state == "ready":
            self._ask_supervisor(probe="the server closed its stderr")

    def _log_stderr(self, raw: bytes) -> None:
        line = _one_line(raw.decode("utf-8", "replace"))
        if line:
            self._stderr.append(line)
            log.info("child_stderr", server=self.name, line=line)

    async def _probe(self, client: Client, why: str, lost: anyio.Event) -> None:
        """Check that a ready child still answers; if it does not, start over."""
        try:
            with anyio.fail_after(PROBE_TIMEOUT):
                await client.list_tools(cache_mode="bypass")
        except Exception as exc:  # any failure to answer means the connection is no use
            self._down(f"{why} and stopped answering ({_describe_exception(exc)})", lost)

    async def _relist(self, client: Client, lost: anyio.Event) -> None:
        """The child said its tools changed: list them again."""
        try:
            with anyio.fail_after(PROBE_TIMEOUT):
                tools = await _list_all_tools(client)
        except Exception as exc:  # a child that cannot list its tools is no use
            self._down(f"listing its changed tools failed ({_describe_exception(exc)})", lost)
            return
        self._tools = tuple(tool for tool in tools if self._offered(tool.name))
        log.info("child_tools_changed", server=self.name, tools=len(self._tools))
        self._set_state("ready")

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, t.ToolListChangedNotification):
            self._ask_supervisor(relist=True)
        elif isinstance(message, Exception):
            # The transport hands us lines that are not JSON-RPC: a child printing to its stdout.
            self._bad_output = _describe_exception(message)
            log.warning("child_bad_output", server=self.name, error=self._bad_output)

    async def _on_http_response(self, response: httpx2.Response) -> None:
        if response.status_code >= 400:
            self._http_status = response.status_code

    def _offered(self, tool: str) -> bool:
        rules = self.entry.tools
        allowed = any(fnmatch.fnmatchcase(tool, pattern) for pattern in rules.allow)
        return allowed and not any(fnmatch.fnmatchcase(tool, pattern) for pattern in rules.deny)

    def _set_state(self, state: ChildState) -> None:
        self._state = state
        if self.on_change is not None:
            try:
                self.on_change(self)
            except Exception:  # a listener's bug must not take the child (or the pool) down
                log.exception("child_listener_failed", server=self.name)

    def _unavailable_reason(self) -> str:
        status = self.status
        if status.state == "starting":
            return "the server is still starting"
        detail = f": {status.error}" if status.error else ""
        if status.state == "restarting":
            return f"the server is down (restart attempt {status.attempt}){detail}"
        return f"the server is {status.state}{detail}"

    # -- explaining failures ------------------------------------------------------------------------------

    def _describe_failure(self, exc: BaseException) -> str:
        ready = self._connected_at is not None
        leaf = _leaf(exc)
        if isinstance(leaf, _StartFailure):
            return str(leaf)
        if isinstance(leaf, FileNotFoundError) and self.entry.command is not None and not ready:
            return f"command not found: {self.entry.command}"
        if isinstance(leaf, PermissionError) and self.entry.command is not None and not ready:
            return f"cannot run {self.entry.command}: permission denied"
        if isinstance(leaf, MCPError) and leaf.code == t.CONNECTION_CLOSED:
            text = "the server exited" if self.entry.command else "the connection closed"
            return self._start_failure(f"{text} during start-up") if not ready else f"{text}"
        if self._http_status is not None:
            hint = " (check its headers)" if self._http_status in (401, 403) else ""
            return f"HTTP {self._http_status} from {self.entry.url}{hint}"
        if isinstance(leaf, httpx2.TransportError):
            return f"cannot reach {self.entry.url}: {_describe_exception(leaf)}"
        text = _describe_exception(leaf)
        return self._start_failure(text) if not ready else text

    def _start_failure(self, text: str) -> str:
        """`text`, with what the child said last: its bad stdout, else its last stderr line."""
        if self._bad_output:
            return f"{text}; it wrote non-protocol output to stdout ({self._bad_output})"
        if self._stderr:
            # The last line that looks like an error says more than a runtime's closing banner.
            telling = [
                line for line in self._stderr if re.search(r"error|exception|fatal|refus|denied|not found", line, re.I)
            ]
            return f"{text}; its stderr ended with: {(telling or list(self._stderr))[-1]}"
        return text


class _StartFailure(Exception):
    """A child that cannot even be spawned, for a reason we can name before trying."""


async def _list_all_tools(client: Client) -> list[t.Tool]:
    tools: list[t.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_TOOL_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools
    raise ChildProtocolError("tools/list", f"more than {MAX_TOOL_PAGES} pages")


def _leaf(exc: BaseException) -> BaseException:
    """The first non-group exception inside (possibly nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = next((e for e in exc.exceptions if not isinstance(e, anyio.get_cancelled_exc_class())), exc.exceptions[0])
    return exc


def _one_line(text: str) -> str:
    """The first non-empty line of `text`, without escape sequences or other control characters."""
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    line = next((line for line in text.splitlines() if line.strip()), "")
    return "".join(char for char in line if char.isprintable()).strip()


def _describe_exception(exc: BaseException) -> str:
    leaf = _leaf(exc)
    if isinstance(leaf, MCPError):
        return f"{_one_line(leaf.message)} (JSON-RPC error {leaf.code})"
    if isinstance(leaf, pydantic.ValidationError):
        return f"malformed message: {_first_error(leaf)}"
    if isinstance(leaf, TimeoutError):
        return "timed out"
    text = _one_line(str(leaf))
    return f"{type(leaf).__name__}: {text}" if text else type(leaf).__name__


def _first_error(exc: pydantic.ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(p) for p in error["loc"])
    return f"{where}: {error['msg']}" if where else str(error["msg"])


class ChildPool:
    """Every configured child, supervised in one task group; `async with` starts them, leaving stops them all."""

    def __init__(
        self,
        servers: Mapping[str, ServerEntry],
        *,
        restart: bool = True,
        start_timeout: float = START_TIMEOUT,
        on_change: Callable[[ChildServer], None] | None = None,
    ) -> None:
        self.children = {
            name: ChildServer(name, entry, restart=restart, start_timeout=start_timeout, on_change=on_change)
            for name, entry in servers.items()
        }
        self._tg: anyio.abc.TaskGroup | None = None

    def __iter__(self) -> Iterator[ChildServer]:
        return iter(self.children.values())

    def __getitem__(self, name: str) -> ChildServer:
        return self.children[name]

    async def __aenter__(self) -> ChildPool:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        for child in self:
            self._tg.start_soon(child.supervise, name=f"supervise {child.name}")
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        # Supervisors never raise, so there is nothing of theirs to report: leaving the group as if its body had
        # ended lets an exception of the body propagate as itself, not wrapped in an ExceptionGroup.
        await self._tg.__aexit__(None, None, None)

    async def wait_settled(self, names: Iterable[str] | None = None) -> None:
        """Wait until each child of `names` (default: every child) has connected or failed once: at most until the
        start deadline of its current attempt (its start timeout from when that attempt began), never forever."""
        for child in self if names is None else (self.children[name] for name in names):
            deadline = child.start_deadline
            if deadline is None:  # its supervisor has not begun the first attempt yet: it does so at once
                deadline = anyio.current_time() + child.start_timeout
            with anyio.CancelScope(deadline=deadline + SETTLE_GRACE):
                await child.settled.wait()
