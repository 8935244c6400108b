"""Serving our MCP front on stdio, stoppable at any moment.

The SDK's `MCPServer.run_stdio_async()` reads stdin on a worker thread, and a thread blocked in `read()` cannot be
cancelled: after SIGTERM or SIGINT the children were stopped, but the process then waited for the host to close
stdin (a host that keeps it open had to SIGKILL us). Here stdin is read only once the event loop reports it
readable, so cancelling the server ends the read at once. The SDK's `stdio_server` still frames the messages and
owns stdout (it points fd 1 at stderr while serving, so stray prints miss the wire); fd 0 is likewise pointed at
/dev/null while we read the real stdin through a private duplicate, as the SDK does.

POSIX: pipes, sockets and terminals are polled. A regular file or /dev/null cannot be polled, but a read of one never
waits for anyone, so it goes to a worker thread. Windows: the event loop cannot poll pipes there, so the SDK's own
transport serves, and a signal takes effect once the host closes our stdin (hosts stop stdio servers that way).
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager

import anyio
import structlog
from mcp.server import MCPServer
from mcp.server.stdio import stdio_server

from meta_agent.children.stdio import CHUNK, lines_of

if sys.platform != "win32":
    import fcntl

log = structlog.get_logger(__name__)


async def serve_stdio(server: MCPServer) -> None:
    """Serve `server` on stdin and stdout until stdin ends or the caller is cancelled."""
    if sys.platform == "win32":
        await server.run_stdio_async()
        return
    if sys.stdin is None:  # started with fd 0 closed: nobody can talk to us, and fd 0 may be another file by now
        log.warning("no_stdin", detail="fd 0 was closed at start; nothing to serve")
        return
    with _claimed_stdin() as fd:
        lines = _decoded(lines_of(_reader(fd)))
        async with stdio_server(stdin=lines) as (read_stream, write_stream):  # type: ignore[arg-type]  # iterated only
            # SDK 2.3 has no public way to serve an MCPServer on given streams; its own Client reads this attribute.
            lowlevel = server._lowlevel_server
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())


@contextmanager
def _claimed_stdin() -> Iterator[int]:
    """A private duplicate of fd 0, with fd 0 itself on /dev/null meanwhile: nothing else in this process, and no
    process it starts, can read a byte of the protocol."""
    private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    try:
        yield private
    finally:
        os.dup2(private, 0)
        os.close(private)


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
