"""Log lines to hosts: meta-agent's own log lines as MCP `notifications/message`, to the callers that asked for them.

A 2025-11-25 session asks with `logging/setLevel` (a level for the whole session); a 2026-07-28 request asks with the
`io.modelcontextprotocol/logLevel` key of its `_meta` (for that request only: that era has no `logging/setLevel`).
A line logged while a caller's request runs (a run's lines, which carry its `run_id`) goes to that caller only, at or
above its level; a line logged outside any request (a child that restarts, a child's stderr) goes to every session
that asked, unless it is about one caller (it names a run, task or conversation, or a refused token): then to none. A
line is the structlog event dict without structlog's internals (`logger` is the notification's logger, `level` its
level), every string redacted as traces are (meta_agent.records.traces.Redactor).

Logging never waits for a host: each caller has an outbox of at most OUTBOX_LINES lines, emptied by one task in the
order they were logged; when it is full the oldest line is dropped, and the next line sent says how many were
(`dropped_lines`). A request's lines are sent before its result (for at most FLUSH_TIMEOUT seconds), none after it.
"""

from __future__ import annotations

import asyncio
import threading
import warnings
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import Any, Final, get_args

import anyio
import mcp.types as t
from mcp.server import MCPServer
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from meta_agent.front.approvals.asking import connection_of
from meta_agent.records.logs import add_log_tap
from meta_agent.records.traces import Redactor

OUTBOX_LINES = 1000
FLUSH_TIMEOUT = 2.0
_LEVELS: Final[tuple[t.LoggingLevel, ...]] = get_args(t.LoggingLevel)  # least severe first
# structlog's level names (add_log_level) as MCP's
_AS_MCP: Final[dict[str, t.LoggingLevel]] = {
    "debug": "debug",
    "info": "info",
    "warning": "warning",
    "warn": "warning",
    "error": "error",
    "exception": "error",
    "critical": "critical",
    "fatal": "critical",
}
_INTERNAL = frozenset({"level", "logger", "exc_info", "stack_info", "_record", "_from_structlog", "positional_args"})
Send = Callable[[t.LoggingLevel, Any, str | None], Awaitable[None]]


class Outbox:
    """The lines bound for one caller at or above its level: a bounded queue, emptied by one task on the loop it was
    made on. `offer` may be called from any thread and never blocks."""

    def __init__(self, level: t.LoggingLevel, send: Send) -> None:
        self.floor = _LEVELS.index(level)
        self._send = send
        self._loop = asyncio.get_running_loop()
        self._lines: deque[tuple[t.LoggingLevel, dict[str, Any], str | None]] = deque(maxlen=OUTBOX_LINES)
        self._dropped = 0
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def wants(self, level: t.LoggingLevel) -> bool:
        return not self._closed and _LEVELS.index(level) >= self.floor

    def offer(self, level: t.LoggingLevel, data: dict[str, Any], logger: str | None) -> None:
        try:
            here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # a thread of ours (the trace writer) or a library's
            here = None
        if here is self._loop:
            self._put(level, data, logger)
            return
        try:
            self._loop.call_soon_threadsafe(self._put, level, data, logger)
        except RuntimeError:  # its loop has ended, and so has its caller
            self._closed = True

    def _put(self, level: t.LoggingLevel, data: dict[str, Any], logger: str | None) -> None:
        if self._closed:
            return
        if len(self._lines) == self._lines.maxlen:
            self._dropped += 1
        self._lines.append((level, data, logger))
        if self._task is None or self._task.done():
            self._task = self._loop.create_task(self._drain())

    async def _drain(self) -> None:
        while self._lines and not self._closed:
            level, data, logger = self._lines.popleft()
            if self._dropped:
                data, self._dropped = {**data, "dropped_lines": self._dropped}, 0
            try:
                with warnings.catch_warnings():  # MCP logging is deprecated in 2026-07-28, and still what hosts show
                    warnings.simplefilter("ignore", MCPDeprecationWarning)
                    await self._send(level, data, logger)
            except Exception:  # the caller is gone: nothing more goes to it (logging it would come back here)
                self.close()

    async def flush(self) -> None:
        """Return once every line offered so far is sent, or FLUSH_TIMEOUT has passed (the rest is dropped)."""
        with anyio.move_on_after(FLUSH_TIMEOUT):
            while self._task is not None and not self._task.done():
                await asyncio.wait([self._task])

    def close(self) -> None:
        self._closed = True
        self._lines.clear()
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()


_NOBODY: Final = object()  # the request being served is a caller's that asked for no lines
# A line logged outside any request that names one of these is about one caller's state (a run another replica
# resumed, a task's background work): it goes to no host, since every session would hear it.
_PRIVATE_KEYS = ("run_id", "task_id", "conversation_id")
_CALLERS_LOGGERS = (
    "meta_agent.front.auth.resource_server",
)  # a caller's refused token is not every session's business
_caller: ContextVar[Outbox | object | None] = ContextVar("host_log_caller", default=None)


class HostLogs:
    """One server's log forwarding: the log tap, the middleware that marks each request's caller, and the
    `logging/setLevel` handler. `install` wires it into a server."""

    def __init__(self, redact: Redactor) -> None:
        self._redact = redact
        self._sessions: weakref.WeakKeyDictionary[Connection, Outbox] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()  # the tap runs on whichever thread logs

    def install(self, server: MCPServer[Any]) -> None:
        """Declare `logging` (by handling `logging/setLevel`), mark every request's caller, and start tapping."""
        lowlevel = server._lowlevel_server  # MCPServer offers no public way to add a spec request handler
        lowlevel.add_request_handler("logging/setLevel", t.SetLevelRequestParams, self._set_level)
        lowlevel.middleware.append(self._mark_caller)
        add_log_tap(self)

    def __call__(self, event: Mapping[str, Any]) -> None:
        """The log tap: hand a line to whoever wants it (see the module's docstring)."""
        level = _AS_MCP.get(str(event.get("level", "")))
        caller = _caller.get()
        if level is None or caller is _NOBODY:
            return
        if isinstance(caller, Outbox):
            targets = [caller]
        elif _callers_own(event):
            return
        else:
            with self._lock:
                targets = list(self._sessions.values())
        targets = [outbox for outbox in targets if outbox.wants(level)]
        if not targets:
            return
        data = {key: self._plain(value) for key, value in event.items() if key not in _INTERNAL}
        logger = event.get("logger")
        for outbox in targets:
            outbox.offer(level, data, logger if isinstance(logger, str) else None)

    def _plain(self, value: Any) -> Any:
        """`value` as JSON, its strings redacted."""
        if value is None or isinstance(value, bool | int | float):
            return value
        if isinstance(value, Mapping):
            return {str(key): self._plain(item) for key, item in value.items()}
        if isinstance(value, list | tuple | set | frozenset):
            return [self._plain(item) for item in value]
        return self._redact(str(value))

    async def _set_level(self, ctx: ServerRequestContext[Any, Any], params: t.SetLevelRequestParams) -> t.EmptyResult:
        """`logging/setLevel` of a 2025-11-25 session: its lines from now on, at `params.level` and above."""
        connection = connection_of(ctx.session)
        outbox = Outbox(params.level, connection.log)
        with self._lock:
            old = self._sessions.get(connection)
            self._sessions[connection] = outbox
        if old is not None:
            old.close()
        return t.EmptyResult()

    async def _mark_caller(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Serve a request with its caller's outbox as the home of the lines it logs; send them before its result."""
        if ctx.request_id is None:  # a notification: nothing of ours runs long under it
            return await call_next(ctx)
        outbox = self._request_outbox(ctx)
        token = _caller.set(outbox if outbox is not None else _NOBODY)
        try:
            result = await call_next(ctx)
            if outbox is not None:
                await outbox.flush()
            return result
        finally:
            _caller.reset(token)
            if outbox is not None:
                outbox.close()

    def _request_outbox(self, ctx: ServerRequestContext[Any, Any]) -> Outbox | None:
        """The outbox of this request's lines: at the level its `_meta` asks (2026-07-28) or its session's."""
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            asked = (ctx.meta or {}).get(t.LOG_LEVEL_META_KEY)
            level: t.LoggingLevel | None = asked if asked in _LEVELS else None
        else:
            with self._lock:
                session = self._sessions.get(connection_of(ctx.session))
            level = _LEVELS[session.floor] if session is not None else None
        if level is None:
            return None
        request_id = ctx.request_id

        async def send(level: t.LoggingLevel, data: Any, logger: str | None) -> None:
            await ctx.session.send_log_message(level, data, logger, related_request_id=request_id)

        return Outbox(level, send)


def _callers_own(event: Mapping[str, Any]) -> bool:
    """Whether a line logged outside any request is about one caller (see _PRIVATE_KEYS), not the server."""
    logger = event.get("logger")
    return any(key in event for key in _PRIVATE_KEYS) or (isinstance(logger, str) and logger in _CALLERS_LOGGERS)
