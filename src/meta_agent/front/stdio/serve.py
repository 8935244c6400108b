"""Serving our MCP front on stdio, stoppable at any moment.

The SDK's `MCPServer.run_stdio_async()` reads stdin on a worker thread, and a thread blocked in `read()` cannot be
cancelled: after SIGTERM or SIGINT the children were stopped, but the process then waited for the host to close
stdin (a host that keeps it open had to SIGKILL us). Here stdin is read only once the event loop reports it
readable, so cancelling the server ends the read at once. The lines are framed here as the SDK's `stdio_server`
frames them, except that a line that is no valid message is answered as JSON-RPC says (front/stdio/lines.py), where
the SDK's session dropped it and left its caller waiting. As the SDK would, we point fd 0 at /dev/null and fd 1 at
stderr while serving (stray prints miss the wire) and use private duplicates of the real ones. Each message goes out
whole in one worker-thread call (the SDK's own writer makes two: write, then flush).

A server that holds its children (build_server's `hold_children`) has them released once the answer to the first
request that is not part of the host's handshake (normally tools/list) has been written: until then, or until they
are released otherwise (a run needs them; the bound), the ids of the requests read and of the answers written are
looked at.

POSIX: pipes, sockets and terminals are polled. A regular file or /dev/null cannot be polled, but a read of one never
waits for anyone, so it goes to a worker thread. Windows: the event loop cannot poll pipes there, so the SDK's own
transport serves, and a signal takes effect once the host closes our stdin (hosts stop stdio servers that way).
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress

import anyio
import mcp.types as t
import structlog
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server import MCPServer
from mcp.shared.message import SessionMessage

from meta_agent.children.stdio import CHUNK
from meta_agent.front.server import MetaAgentServer
from meta_agent.front.stdio.lines import Complaints, Refusal, lines_within, screened

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
        output = _Output(out)
        to_server, from_host = anyio.create_memory_object_stream[SessionMessage](0)
        to_host, from_server = anyio.create_memory_object_stream[SessionMessage](0)
        async with anyio.create_task_group() as tg:
            tg.start_soon(_read, _reader(fd), to_server, output, first_answer)
            tg.start_soon(_write, from_server, output, first_answer)
            # SDK 2.3 has no public way to serve an MCPServer on given streams; its own Client reads this attribute.
            lowlevel = server._lowlevel_server
            await lowlevel.run(from_host, to_host, lowlevel.create_initialization_options())


async def _read(
    receive: Callable[[], Awaitable[bytes]],
    to_server: MemoryObjectSendStream[SessionMessage],
    output: _Output,
    first_answer: _FirstAnswer,
) -> None:
    """The host's lines, each handed to the server as a message or answered here, until the input ends."""
    complaints = Complaints()
    try:
        async with to_server:
            async for line in lines_within(receive):
                match screened(line):
                    case Refusal() as refusal:
                        complaints.note(refusal)
                        if refusal.answer is not None:
                            await output.write(refusal.answer)
                    case None:
                        pass
                    case message:
                        first_answer.read(message)
                        await to_server.send(SessionMessage(message))
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        return  # the server stopped reading: it is ending
    finally:
        complaints.close()


async def _write(
    from_server: MemoryObjectReceiveStream[SessionMessage], output: _Output, first_answer: _FirstAnswer
) -> None:
    """The server's messages, each written whole, until it closes its end."""
    async with from_server:
        async for session_message in from_server:
            await output.write(session_message.message)
            first_answer.written(session_message.message)


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
    handshake has been written; while they are held it notes the ids of the requests coming in and of the answers
    going out."""

    def __init__(self, server: MetaAgentServer | None) -> None:
        self._server = server
        self._awaited: set[int | str] = set()

    def _held(self) -> bool:
        return self._server is not None and self._server.children_held()

    def read(self, message: t.JSONRPCMessage) -> None:
        """`message` came in: a real request's id is noted while the children are held."""
        if self._held() and isinstance(message, t.JSONRPCRequest) and message.method not in HANDSHAKE:
            self._awaited.add(message.id)

    def written(self, message: t.JSONRPCMessage) -> None:
        """`message` went out: if it answered a real request, the children may start."""
        if not self._awaited or not self._held():
            return
        if isinstance(message, t.JSONRPCResponse | t.JSONRPCError) and message.id in self._awaited:
            self._awaited.clear()
            assert self._server is not None
            self._server.release_children()


class _Output:
    """The wire's writing end: each message written whole by one worker-thread call, one message at a time (the
    server's answers and the answers to bad lines come from two tasks)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = anyio.Lock()

    async def write(self, message: t.JSONRPCMessage) -> None:
        text = message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"  # as the SDK's stdio_server
        async with self._lock:
            await anyio.to_thread.run_sync(_write_all, self._fd, text)


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
