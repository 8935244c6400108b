"""Serving our MCP front on stdio, stoppable at any moment.

The SDK's `MCPServer.run_stdio_async()` reads stdin on a worker thread, and a thread blocked in `read()` cannot be
cancelled: after SIGTERM or SIGINT the children were stopped, but the process then waited for the host to close
stdin (a host that keeps it open had to SIGKILL us). Here stdin is read only once the event loop reports it
readable, so cancelling the server ends the read at once. The SDK's `stdio_server` still frames the messages. As
the SDK would, we point fd 0 at /dev/null and fd 1 at stderr while serving (stray prints miss the wire) and use
private duplicates of the real ones. Each message goes out whole in one worker-thread call (the SDK's own writer
makes two: write, then flush).

A server that holds its children (build_server's `hold_children`) has them released once the answer to the first
request that is not part of the host's handshake (normally tools/list) has been written: until then, or until they
are released otherwise (a run needs them; the bound), the ids of the requests read and of the answers written are
looked at.

POSIX: pipes, sockets and terminals are polled. A regular file or /dev/null cannot be polled, but a read of one never
waits for anyone, so it goes to a worker thread. Windows: the event loop cannot poll pipes there, so the SDK's own
transport serves, and a signal takes effect once the host closes our stdin (hosts stop stdio servers that way).
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress

import anyio
import structlog
from mcp.server import MCPServer
from mcp.server.stdio import stdio_server

from meta_agent.children.stdio import CHUNK, lines_of
from meta_agent.front.server import MetaAgentServer

if sys.platform != "win32":
    import fcntl

log = structlog.get_logger(__name__)

# A host's handshake and liveness checks: the answer after them is the host's first real one.
HANDSHAKE = frozenset({"initialize", "server/discover", "ping"})


async def serve_stdio(server: MCPServer) -> None:
    """Serve `server` on stdin and stdout until stdin ends or the caller is cancelled."""
    for fd, stream in ((0, sys.stdin), (1, sys.stdout)):
        if stream is None:  # started with it closed: nobody can talk to us (or hear us), and it may be another file now
            log.warning("stdio_closed", detail=f"fd {fd} was closed at start; nothing to serve")
            return
    if sys.platform == "win32":
        await server.run_stdio_async()
        return
    with _claimed(0, _null_to_read) as fd, _claimed(1, _stderr_or_null) as out:
        holding = server if isinstance(server, MetaAgentServer) and server.hold_children else None
        first_answer = _FirstAnswer(holding)
        lines = first_answer.watching(_decoded(lines_of(_reader(fd))))
        output = _Output(out, first_answer)
        # Both are used only as far as the SDK's transport uses them: iterated, and written then flushed.
        async with stdio_server(stdin=lines, stdout=output) as (read_stream, write_stream):  # type: ignore[arg-type]
            # SDK 2.3 has no public way to serve an MCPServer on given streams; its own Client reads this attribute.
            lowlevel = server._lowlevel_server
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())


@contextmanager
def _claimed(fd: int, diversion: Callable[[], int]) -> Iterator[int]:
    """A private duplicate of `fd`, with `fd` itself on what `diversion` opens meanwhile: nothing else in this
    process, and no process it starts, can read or write a byte of the protocol."""
    private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    elsewhere = diversion()
    os.dup2(elsewhere, fd)
    os.close(elsewhere)
    try:
        yield private
    finally:
        if fd == 1 and sys.stdout is not None:  # stray prints buffered meanwhile go where they went: not to the wire
            with suppress(OSError, ValueError):
                sys.stdout.flush()
        os.dup2(private, fd)
        os.close(private)


def _null_to_read() -> int:
    return os.open(os.devnull, os.O_RDONLY)


def _stderr_or_null() -> int:
    try:
        return os.dup(2)
    except OSError:  # fd 2 is closed
        return os.open(os.devnull, os.O_WRONLY)


class _FirstAnswer:
    """Releases the held children of `server` once the answer to the host's first request that is not part of its
    handshake has been written; while they are held it reads the ids of the requests coming in and of the answers
    going out."""

    def __init__(self, server: MetaAgentServer | None) -> None:
        self._server = server
        self._awaited: set[int | str] = set()

    def _held(self) -> bool:
        return self._server is not None and self._server.children_held()

    async def watching(self, lines: AsyncIterator[str]) -> AsyncIterator[str]:
        """`lines`, the ids of the real requests among them noted while the children are held."""
        async for line in lines:
            if self._held():
                message = _parsed(line)
                method, request_id = message.get("method"), _id_of(message)
                if isinstance(method, str) and method not in HANDSHAKE and request_id is not None:
                    self._awaited.add(request_id)
            yield line

    def written(self, line: str) -> None:
        """`line` went out: if it answered a real request, the children may start."""
        if not self._awaited or not self._held():
            return
        message = _parsed(line)
        if "method" not in message and _id_of(message) in self._awaited:
            self._awaited.clear()
            assert self._server is not None
            self._server.release_children()


def _parsed(line: str) -> dict[str, object]:
    """`line` as a JSON object; empty if it is not one (the SDK's transport says what is wrong with it)."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return {}
    return message if isinstance(message, dict) else {}


def _id_of(message: dict[str, object]) -> int | str | None:
    request_id = message.get("id")
    return request_id if isinstance(request_id, int | str) and not isinstance(request_id, bool) else None


class _Output:
    """The wire's writing end as the SDK's transport uses it (`write`, then `flush`): each message written whole by
    one worker-thread call."""

    def __init__(self, fd: int, first_answer: _FirstAnswer) -> None:
        self._fd = fd
        self._first_answer = first_answer

    async def write(self, text: str) -> None:
        await anyio.to_thread.run_sync(_write_all, self._fd, text)
        self._first_answer.written(text)

    async def flush(self) -> None:
        return


def _write_all(fd: int, text: str) -> None:
    view = memoryview(text.encode())
    while view:
        view = view[os.write(fd, view) :]


def _reader(fd: int) -> Callable[[], Awaitable[bytes]]:
    """Reads of `fd` that wait in the event loop, where a wait can be cancelled; b"" once the input has ended."""
    mode = os.fstat(fd).st_mode
    pollable = stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)

    async def read() -> bytes:
        try:
            if not pollable:
                return await anyio.to_thread.run_sync(os.read, fd, CHUNK)
            while True:
                await anyio.wait_readable(fd)
                try:
                    return os.read(fd, CHUNK)
                except BlockingIOError:  # a non-blocking descriptor woken with nothing to read after all
                    continue
        except OSError:  # a terminal hung up, or the like: the input has ended
            return b""

    return read


async def _decoded(lines: AsyncIterator[bytes]) -> AsyncIterator[str]:
    async for line in lines:
        yield line.decode("utf-8", "replace")
