"""Child MCP servers and their supervision.

One `ChildServer` per `servers.json` entry. Its `supervise()` task is the only task that enters and exits the
child's `mcp.Client` (the SDK requires it), lists the child's tools (every page), and reconnects with a capped
exponential backoff when the child dies. Calls come from other tasks and share the connected client.

The rest of the package serves this one: connect.py opens a connection (stdio or HTTP); a stdio child runs in its
own process group, ended whole when its connection ends, so no grandchild outlives it (stdio.py); its stderr goes to
our log line by line, and the pipe closing is how a dead stdio child is noticed between calls (stderr.py); why a
child failed is told in one line (failures.py); a child's questions during a call go to that call's caller
(questions.py).

We hear that a child's tools changed as its era says: a 2025-11-25 child sends `notifications/tools/list_changed`,
a 2026-07-28 child sends it on the `subscriptions/listen` stream its supervisor keeps open (tool_changes.py). A child
whose failure no retry can mend (its command does not exist) is failed, not restarted; one that exits during a call
fails that call saying its exit status and its last stderr line. The children run in a
`ChildPool` (pool.py), which also retires a child whose entry a reload removed or changed.
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

import anyio
import httpx2
import mcp.types as t
import pydantic
import structlog
from anyio.abc import TaskStatus
from mcp import Client
from mcp.shared.exceptions import MCPError

from meta_agent.children.connect import Hooks, connect, list_all_tools
from meta_agent.children.failures import Clues, describe_exception, describe_failure, first_error, lasts
from meta_agent.children.questions import QuestionRelay, Questions
from meta_agent.children.tool_changes import hearing_tool_changes
from meta_agent.config.servers import ServerEntry
from meta_agent.core.tools import ProgressFn
from meta_agent.errors import ChildDied, ChildProtocolError, ChildTimeout, ChildUnavailable

log = structlog.get_logger(__name__)

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
# What a retired child's calls in flight get beyond their own timeout before its connection is closed.
RETIRE_GRACE = 1.0
# A call whose stdio child exited under it waits this long, at most, for the child's exit status and last stderr
# line, to say them (the process is reaped and its pipe read to the end a few milliseconds after its stdout closes).
CRASH_WAIT = 1.0

ChildState = Literal["starting", "ready", "restarting", "failed", "disabled"]


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
        self._listed: tuple[t.Tool, ...] = ()  # kept when the child goes down: the toolbox lists them as withheld
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
        self._clues = Clues()  # what the current connection's child said that can explain its failure
        self._relay = QuestionRelay(name)
        self._retired: str | None = None  # why new calls are refused: the entry was removed or changed
        self._calls = 0  # calls in flight
        self._idle = anyio.Event()  # set while no call is in flight
        self._idle.set()
        if entry.disabled:
            self.settled.set()

    # -- what callers read -------------------------------------------------------------------------------

    @property
    def tools(self) -> tuple[t.Tool, ...]:
        """The child's tools that `tools.allow`/`tools.deny` let through; empty unless ready."""
        return self._tools

    @property
    def listed(self) -> tuple[t.Tool, ...]:
        """Every tool the child listed while it was last ready, `tools.allow`/`tools.deny` or not; empty if it never
        was. Kept while the child is down, so what it had stays known (as withheld) to a host's tool selector."""
        return self._listed

    def why_not_offered(self, tool: str) -> str | None:
        """Why `tools.allow`/`tools.deny` withhold the child's tool `tool` (its own name); None if they offer it."""
        rules = self.entry.tools
        if not any(fnmatch.fnmatchcase(tool, pattern) for pattern in rules.allow):
            return "not in tools.allow"
        denied_by = next((pattern for pattern in rules.deny if fnmatch.fnmatchcase(tool, pattern)), None)
        return None if denied_by is None else f"denied by tools.deny pattern {denied_by!r}"

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
        client, lost, clues = self._client, self._lost, self._clues
        stderr_before = clues.stderr_lines  # what the child writes to stderr from now on may say why it dies
        if self._retired is not None:
            raise ChildUnavailable(self.name, self._retired)
        if client is None or self._state != "ready":
            raise ChildUnavailable(self.name, self._unavailable_reason())
        if not any(offered.name == tool for offered in self._tools):
            raise ChildUnavailable(self.name, f"{tool} is not offered (not listed, or withheld by tools.allow/deny)")
        timeout = self.entry.timeout
        try:
            with self._in_flight(), self._relay.calling(questions):
                return await client.call_tool(
                    tool, dict(arguments), read_timeout_seconds=timeout, progress_callback=on_progress
                )
        except MCPError as exc:
            if self.retired is not None and exc.code == t.CONNECTION_CLOSED:
                raise ChildDied(self.name, f"{self.retired}; {tool} was still running after its timeout") from None
            if exc.code == t.CONNECTION_CLOSED:
                raise await self._died(tool, lost, clues, stderr_before, "the server's connection closed") from None
            if exc.code == t.REQUEST_TIMEOUT:
                self._ask_supervisor(probe=f"{tool} timed out")  # a stuck child is restarted, not waited on again
                raise ChildTimeout(self.name, f"{tool} took longer than {timeout:g} s and was cancelled") from None
            raise ChildProtocolError(self.name, f"{tool} failed: {describe_exception(exc)}") from None
        except pydantic.ValidationError as exc:
            raise ChildProtocolError(self.name, f"{tool} returned a malformed result: {first_error(exc)}") from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, httpx2.TransportError) as exc:
            lost_how = f"the connection was lost ({describe_exception(exc)})"
            raise await self._died(tool, lost, clues, stderr_before, lost_how) from None
        except Exception as exc:  # e.g. a result that breaks the tool's own outputSchema: the SDK raises RuntimeError
            raise ChildProtocolError(self.name, f"{tool} failed: {describe_exception(exc)}") from None

    async def _died(self, tool: str, lost: anyio.Event, clues: Clues, stderr_before: int, how: str) -> ChildDied:
        """The connection of `lost` ended during a call of `tool`: it is down from now on, and the call's error says
        how; for a stdio child that exited, its exit status and the last line it wrote to stderr during the call
        (`stderr_before`: its stderr lines before the call), as its status does once they are known."""
        restarting = "; restarting it" if self.restart else ""
        self._down(f"{how} during {tool}", lost)  # at once: later calls fail fast meanwhile
        if self.entry.command is not None:  # a stdio child: its exit may say more
            await clues.settled(CRASH_WAIT)
        if not clues.exited.is_set():  # an HTTP child; or it did not exit (yet), or a signal of ours ended it
            return ChildDied(self.name, f"{how} during {tool}{restarting}")
        why = clues.explain_exit(f"the server exited during {tool}", stderr_before)
        if lost is self._lost and self._state != "ready":  # the status says so too, until the child is back
            self._error = why
        return ChildDied(self.name, f"{why}{restarting}")

    @contextmanager
    def _in_flight(self) -> Iterator[None]:
        self._calls += 1
        self._idle = anyio.Event() if self._idle.is_set() else self._idle
        try:
            yield
        finally:
            self._calls -= 1
            if self._calls == 0:
                self._idle.set()

    @property
    def retired(self) -> str | None:
        """Why the child refuses new calls for good (its entry was removed or changed); None while it is in use."""
        return self._retired

    def retire(self, why: str) -> None:
        """Refuse new calls from now on, saying `why` (the entry was removed or changed); `drained` tells when the
        calls in flight are over."""
        self._retired = why

    async def drained(self) -> None:
        """Return once no call is in flight, or once the longest a call may still take has passed."""
        with anyio.move_on_after(self.entry.timeout + RETIRE_GRACE):
            await self._idle.wait()

    # -- supervision ---------------------------------------------------------------------------------------

    async def supervise(self) -> None:
        """Connect, serve, and reconnect after a failure, until cancelled. Never raises but for cancellation."""
        if self.entry.disabled:
            return
        while True:
            await self._connect_once()
            if self._retry_at is None:  # no restarts (the one-shot commands), or a failure no retry can mend
                if self.restart:
                    log.warning("child_failed", server=self.name, error=self._error)
                return
            log.warning("child_down", server=self.name, error=self._error, attempt=self._attempt)
            await anyio.sleep(max(0.0, self._retry_at - time.monotonic()))
            self._retry_at = None
            self._restarts += 1

    async def _connect_once(self) -> None:
        """One connection's life: returns once it failed to start or was lost (`_down` has run)."""
        self._lost = anyio.Event()
        self._wake = anyio.Event()
        self._want_probe, self._want_relist = "", False
        self._connected_at = None
        self._clues = Clues()
        started = time.monotonic()
        self.start_deadline = anyio.current_time() + self.start_timeout
        try:
            async with anyio.create_task_group() as tg:
                timer = await tg.start(self._give_up_start, tg.cancel_scope)
                relist = partial(self._ask_supervisor, relist=True)
                async with (
                    connect(self.entry, self._hooks()) as client,
                    hearing_tool_changes(self.name, client, self._lost, relist),
                ):
                    tools = await list_all_tools(client)
                    timer.cancel()
                    if self._lost.is_set():  # the deadline came as the answer did: the start was given up already
                        return
                    self._connected_at = time.monotonic()
                    self._start_seconds = self._connected_at - started
                    self._client = client
                    self._keep(tools)
                    info = client.server_info
                    self._identity = (
                        client.protocol_version,
                        info.name if info else None,
                        info.version if info else None,
                    )
                    self._error = None
                    self._set_state("ready")
                    self.settled.set()
                    log.info("child_ready", server=self.name, tools=len(self._tools), seconds=self._start_seconds)
                    await self._serve(client)
        except Exception as exc:  # the SDK raises anything from OSError to ExceptionGroup; all end this connection
            ready = self._connected_at is not None
            why = describe_failure(exc, self.entry, ready=ready, clues=self._clues)
            self._down(why, lasting=lasts(exc, self.entry, ready=ready))
        finally:
            self._client = None
            self._tools = ()

    async def _give_up_start(
        self, starting: anyio.CancelScope, *, task_status: TaskStatus[anyio.CancelScope] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """At the start deadline, record the failed start, then cancel `starting`: stopping the child's processes
        can take seconds more (stdio.py), and whoever waits for the child should not wait that out too."""
        with anyio.CancelScope() as timer:
            task_status.started(timer)
            assert self.start_deadline is not None
            await anyio.sleep_until(self.start_deadline)
            self._down(self._clues.explain_start(f"no answer within {self.start_timeout:g} s"))
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

    def _down(self, reason: str, lost: anyio.Event | None = None, *, lasting: bool = False) -> None:
        """The connection is over or never came up: fail calls fast from now on and schedule the next attempt; none
        for a `lasting` failure (no retry can mend it: the child is failed, until a reload of servers.json).

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
        retrying = self.restart and not lasting
        if retrying:
            self._retry_at = time.monotonic() + min(BACKOFF_CAP, BACKOFF_FIRST * 2 ** (self._attempt - 1))
        self._set_state("restarting" if retrying else "failed")
        self.settled.set()

    def _hooks(self) -> Hooks:
        """The hooks of a new connection: what its child says goes to `_clues`, which that connection starts over."""
        return Hooks(
            name=self.name,
            clues=self._clues,
            questions=self._relay,
            tools_changed=partial(self._ask_supervisor, relist=True),
            stderr_closed=self._stderr_closed,
        )

    def _stderr_closed(self) -> None:
        if self._state == "ready":
            self._ask_supervisor(probe="the server closed its stderr")

    async def _probe(self, client: Client, why: str, lost: anyio.Event) -> None:
        """Check that a ready child still answers; if it does not, start over."""
        try:
            with anyio.fail_after(PROBE_TIMEOUT):
                await client.list_tools(cache_mode="bypass")
        except Exception as exc:  # any failure to answer means the connection is no use
            self._down(f"{why} and stopped answering ({describe_exception(exc)})", lost)

    async def _relist(self, client: Client, lost: anyio.Event) -> None:
        """The child said its tools changed: list them again."""
        try:
            with anyio.fail_after(PROBE_TIMEOUT):
                tools = await list_all_tools(client)
        except Exception as exc:  # a child that cannot list its tools is no use
            self._down(f"listing its changed tools failed ({describe_exception(exc)})", lost)
            return
        self._keep(tools)
        log.info("child_tools_changed", server=self.name, tools=len(self._tools))
        self._set_state("ready")

    def _keep(self, listed: Sequence[t.Tool]) -> None:
        """What a ready child listed: all of it, and the tools offered of it."""
        self._listed = tuple(listed)
        self._tools = tuple(tool for tool in listed if self.why_not_offered(tool.name) is None)

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
