"""A stdio child's stderr: a pipe of ours, read line by line, so nothing a child prints reaches our stdout.

The child gets the pipe's write end as its stderr. A task reads the other end, hands on each line, and says when the
pipe has closed: when the child and every process that inherited its stderr are gone. That is how a dead stdio
child is noticed between calls.

How the pipe is read depends on the platform. On Linux and macOS the event loop waits until the pipe is readable
(`anyio.wait_readable`) and a non-blocking read takes what is there. Windows' Proactor event loop can wait for
sockets only, not for a pipe, so there a worker thread blocks in `os.read` instead. `READ_IN_THREAD` chooses; the
tests also run the threaded way on POSIX, where it works the same.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol, TextIO

import anyio
from anyio.abc import TaskGroup

from meta_agent.children.stdio import CHUNK

# Whether the pipe is read by blocking reads in a worker thread (Windows) or by waiting on the event loop (POSIX).
READ_IN_THREAD = sys.platform == "win32"
# A stderr "line" longer than this (a child drawing progress bars without newlines) is handed on in pieces.
LINE_MAX = 64 * 1024


@contextmanager
def stderr_pipe(tg: TaskGroup, on_line: Callable[[bytes], None], on_closed: Callable[[], None]) -> Iterator[TextIO]:
    """A file to give a child as its stderr. A task in `tg` calls `on_line` with each non-empty line written to it
    (without its line end; "\r" ends a line too, and a line past `LINE_MAX` bytes comes in pieces), then `on_closed`
    once every writer has closed it. Cancelling that task closes our end."""
    read_fd, write_fd = os.pipe()
    reader = _ThreadReader(read_fd) if READ_IN_THREAD else _LoopReader(read_fd)
    tg.start_soon(_pump, reader, on_line, on_closed)
    with os.fdopen(write_fd, "w") as writer:
        yield writer


class _Reader(Protocol):
    async def receive(self) -> bytes:
        """The next bytes written to the pipe; b"" once every writer has closed it."""
        ...

    def close(self) -> None:
        """Close our end; called once, when the reading is over or was cancelled."""
        ...


async def _pump(reader: _Reader, on_line: Callable[[bytes], None], on_closed: Callable[[], None]) -> None:
    pending = b""
    try:
        while chunk := await reader.receive():
            *lines, pending = (pending + chunk).replace(b"\r", b"\n").split(b"\n")
            for line in lines:
                _hand_on(line, on_line)
            while len(pending) > LINE_MAX:  # a line with no end in sight: its start goes on now
                on_line(pending[:LINE_MAX])
                pending = pending[LINE_MAX:]
    finally:
        reader.close()
    _hand_on(pending, on_line)
    on_closed()


def _hand_on(line: bytes, on_line: Callable[[bytes], None]) -> None:
    """A non-empty `line` to `on_line`, in pieces of at most `LINE_MAX` bytes."""
    for start in range(0, len(line), LINE_MAX):
        on_line(line[start : start + LINE_MAX])


class _LoopReader:
    """POSIX: the event loop waits until the pipe is readable, so a read never blocks it."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        os.set_blocking(fd, False)

    async def receive(self) -> bytes:
        while True:
            await anyio.wait_readable(self._fd)
            try:
                return os.read(self._fd, CHUNK)
            except BlockingIOError:  # woken with nothing to read after all
                continue

    def close(self) -> None:
        os.close(self._fd)


class _ThreadReader:
    """Windows (and the tests): each read blocks in a worker thread until the child writes or the pipe closes.

    Cancelling a receive abandons its thread, whose read goes on until the child writes or exits (the connection
    that cancels it is ending the child; on Windows closing the job kills every process that could hold the pipe).
    Until then that thread would hold up the interpreter's exit, as anyio's worker threads are not daemons.
    Whichever side is last closes the fd: closing it under a read in progress would block the event loop on Windows
    (the C runtime holds the fd's lock for the whole read), and elsewhere could close a number the OS has since
    given to another file.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = threading.Lock()
        self._reading = False
        self._closed = threading.Event()  # set under the lock; an Event only so a type checker does not narrow it
        # A limiter of its own: a read lasts as long as the child stays quiet, and must not hold one of the default
        # limiter's tokens that other work in threads waits for.
        self._limiter = anyio.CapacityLimiter(1)

    async def receive(self) -> bytes:
        return await anyio.to_thread.run_sync(self._read, abandon_on_cancel=True, limiter=self._limiter)

    def _read(self) -> bytes:
        """In the worker thread."""
        with self._lock:
            if self._closed.is_set():
                return b""
            self._reading = True
        try:
            chunk = os.read(self._fd, CHUNK)
        finally:
            with self._lock:
                self._reading = False
                abandoned = self._closed.is_set()
            if abandoned:  # the receive was cancelled during the read: closing is left to us
                os.close(self._fd)
        return b"" if abandoned else chunk

    def close(self) -> None:
        with self._lock:
            self._closed.set()
            if self._reading:
                return
        os.close(self._fd)
