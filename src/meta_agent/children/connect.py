"""One connection to a child: its transport (stdio or streamable HTTP), the `mcp.Client` over it, and its tools.

The supervisor (supervisor.py) opens one connection at a time per child. What the child says besides the answers
to our requests comes back through the connection's `Hooks`: a changed tool list, its questions during a call, and
what can explain a failure later (its stderr, non-protocol output on its stdout, an HTTP error status).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
import mcp.types as t
import structlog
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from meta_agent.children.failures import Clues, StartFailure, describe_exception, quoted
from meta_agent.children.questions import QuestionRelay
from meta_agent.children.stderr import LINE_MAX, stderr_pipe
from meta_agent.children.stdio import stdio_child
from meta_agent.config.servers import ServerEntry
from meta_agent.errors import ChildProtocolError

log = structlog.get_logger(__name__)

# The SDK's default httpx2 timeout is 5 s, which kills any silent long tool call; ours is per call instead.
HTTP_TIMEOUT = httpx2.Timeout(30.0, read=None)
# `tools/list` pages read at most; a child that pages forever is broken.
MAX_TOOL_PAGES = 1000


@dataclass(frozen=True, kw_only=True)
class Hooks:
    """What one connection reports to its supervisor besides the answers to its requests."""

    name: str  # the child's name, for the log
    clues: Clues  # filled with what the child says that can explain a failure
    questions: QuestionRelay  # answers the child's questions during our calls
    tools_changed: Callable[[], None]  # the child said its tools changed
    stderr_closed: Callable[[], None]  # a stdio child closed its stderr: it may be gone

    async def on_message(self, message: Any) -> None:
        if isinstance(message, t.ToolListChangedNotification):
            self.tools_changed()
        elif isinstance(message, Exception):
            # The transport hands us lines that are not JSON-RPC: a child printing to its stdout.
            self.clues.bad_output = describe_exception(message)
            log.warning("child_bad_output", server=self.name, error=self.clues.bad_output)

    def on_stderr(self, raw: bytes) -> None:
        line = quoted(raw.decode("utf-8", "replace"), LINE_MAX)
        if line:
            self.clues.note_stderr(line)
            log.info("child_stderr", server=self.name, line=line)

    def on_stderr_closed(self) -> None:
        self.clues.stderr_closed.set()
        self.stderr_closed()

    async def on_http_response(self, response: httpx2.Response) -> None:
        if response.status_code >= 400:
            self.clues.http_status = response.status_code


@asynccontextmanager
async def connect(entry: ServerEntry, hooks: Hooks) -> AsyncIterator[Client]:
    """A client connected to the child of `entry`, past the initialize handshake; leaving ends the connection
    (and a stdio child's whole process group).

    Raises:
        StartFailure: the child cannot be started, for a reason known before trying.
        Exception: anything the SDK, the transport or the OS raise when the connection cannot be made or ends.
    """
    if entry.command is None:
        assert entry.url is not None
        event_hooks = {"response": [hooks.on_http_response]}
        async with (
            httpx2.AsyncClient(headers=entry.headers, timeout=HTTP_TIMEOUT, event_hooks=event_hooks) as http,
            _client(streamable_http_client(entry.url, http_client=http), hooks) as client,
        ):
            yield client
        return
    if entry.cwd is not None and not await anyio.Path(entry.cwd).is_dir():
        raise StartFailure(f"cwd {entry.cwd!r} is not a directory")
    # Bytes that are not UTF-8 become U+FFFD: a strict decoder would stall the connection until the child exits.
    params = StdioServerParameters(
        command=entry.command, args=list(entry.args), env=entry.env, cwd=entry.cwd, encoding_error_handler="replace"
    )
    async with anyio.create_task_group() as tg:
        with stderr_pipe(tg, hooks.on_stderr, hooks.on_stderr_closed) as errlog:
            async with _client(stdio_child(hooks.name, params, errlog, hooks.clues.note_exit), hooks) as client:
                errlog.close()  # the child has its own copy now; the pipe ends when the child does
                yield client
        tg.cancel_scope.cancel()


async def list_all_tools(client: Client) -> list[t.Tool]:
    """Every page of the child's tools.

    Raises:
        ChildProtocolError: the child pages on past `MAX_TOOL_PAGES`.
    """
    tools: list[t.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_TOOL_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools
    raise ChildProtocolError("tools/list", f"more than {MAX_TOOL_PAGES} pages")


def _client(transport: Any, hooks: Hooks) -> Client:
    # The callbacks declare elicitation and sampling, so children offer the tools that ask.
    return Client(
        transport,
        cache=None,
        message_handler=hooks.on_message,
        elicitation_callback=hooks.questions.elicit,
        sampling_callback=hooks.questions.sample,
    )
