"""Bounds on what the HTTP front's connections may hold (README, Commands: `serve --transport http`), for
`front.http.serve`: a cap on the connections open at once below the process's file limit, a time limit for a request
to arrive whole, and an accept loop that rests when the process is out of descriptors.

uvicorn bounds none of these: its `limit_concurrency` answers 503 to a request that has arrived whole (a connection
that sends half a request counts against nothing), its `timeout_keep_alive` runs only between requests (and a byte
of the next one stops it), and h11 bounds a request's head in size (16 KB), not in time. asyncio's accept loop
(Python 3.11) goes on calling accept() after EMFILE, up to the listen backlog's count each time the socket is ready,
and schedules a retry for each failure: retries that multiply into tens of thousands of failed calls a second.

So the listening sockets and uvicorn's h11 protocol are wrapped here. `_Listener.accept` rests after an EMFILE
until asyncio's own retry, a second later, and keeps the connections it has accepted under the cap: past it, it
closes the connection that has waited longest for its request to arrive whole (it is the likeliest to be one that
never will), or, when every connection holds a whole request, answers 503 to those that come. `BoundedH11` gives
each request `REQUEST_TIMEOUT` seconds to arrive, and more as its body arrives (at `MIN_BODY_RATE`); then 408.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import sys
import time
from asyncio.constants import ACCEPT_RETRY_DELAY
from contextlib import suppress
from typing import Any, ClassVar

import h11
import structlog
from uvicorn.protocols.http.h11_impl import H11Protocol

# Connections open at once: at most this share of the process's file limit (read again as connections come, so
# that `ulimit -n` and prlimit count); the rest is for what a connection's requests open beside it (a run's trace
# file, the children's pipes, the database's connections) and for the process itself.
CONNECTION_SHARE = 0.5
MIN_CONNECTIONS = 8  # connections allowed however low the file limit: a server must take a few callers at once
# Seconds a request may take to arrive whole from its first byte (or from its connection's opening): a client
# sends its head at once; one that trickles it, or sends nothing, holds a descriptor for nothing.
REQUEST_TIMEOUT = 10.0
MIN_BODY_RATE = 10_000  # bytes a second: each byte of a request adds 1/MIN_BODY_RATE s to its time limit
# Errors of accept() that say the process (or system) is out of a resource: asyncio retries after ACCEPT_RETRY_DELAY.
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_SWEEP_FROM = 64  # accepted sockets counted before the closed ones are first let go of
_REFUSED_AT_ONCE = 64  # connections refused in one turn of the event loop: other work goes on between turns
_REFUSED = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
_TOO_SLOW = b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

log = structlog.get_logger(__name__)


def connection_cap() -> int:
    """The connections the process may hold open at once, from its file limit now."""
    if sys.platform == "win32":  # no RLIMIT_NOFILE: the limit there is the C runtime's, far above sockets in use
        return sys.maxsize
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return sys.maxsize if soft == resource.RLIM_INFINITY else max(MIN_CONNECTIONS, int(soft * CONNECTION_SHARE))


class Admission:
    """What the listening sockets and the connections of one server share: the sockets accepted (a descriptor each
    until closed), and the connections waiting for a request to arrive whole, the longest waiting first."""

    def __init__(self) -> None:
        self.accepted: set[socket.socket] = set()
        self.waiting: dict[BoundedH11, None] = {}
        self._sweep_at = _SWEEP_FROM

    def full(self) -> bool:
        """Whether the accepted sockets still open are as many as the cap. Those closed are let go of when the set
        reaches the cap, or twice its size after the last time (so that it cannot grow without a cap)."""
        cap = connection_cap()
        if len(self.accepted) >= min(cap, self._sweep_at):
            self.accepted = {sock for sock in self.accepted if sock.fileno() != -1}
            self._sweep_at = 2 * len(self.accepted) + _SWEEP_FROM
        return len(self.accepted) >= cap

    def evict(self) -> bool:
        """Close the connection that has waited longest for its request; False if none is waiting."""
        if not self.waiting:
            return False
        next(iter(self.waiting)).evict()
        self.closed_at_cap("the longest waiting for its request closed")
        return True

    def closed_at_cap(self, how: str) -> None:
        """Say that a connection was closed for the cap (a flood of them is a line a second: records.log_repeats)."""
        log.warning("http_connection_closed_at_cap", cap=connection_cap(), how=how)


class _Listener(socket.socket):
    """A listening socket whose accept() rests after running out of descriptors and keeps to the connection cap."""

    admission: Admission
    _rests_until = 0.0

    def accept(self) -> tuple[socket.socket, Any]:
        if time.monotonic() < self._rests_until:
            raise BlockingIOError  # asyncio stops accepting until its retry
        if self.admission.full():
            if self.admission.evict():
                raise ConnectionAbortedError  # asyncio accepts again on its next turn, the evicted one closed by then
            self._refuse_some()
        conn, address = self._accepted()
        self.admission.accepted.add(conn)
        return conn, address

    def _accepted(self) -> tuple[socket.socket, Any]:
        try:
            return super().accept()
        except OSError as exc:
            if exc.errno in _OUT_OF_RESOURCES:
                # asyncio calls again at once, and retries after its delay: fail once, then rest until that retry
                self._rests_until = time.monotonic() + ACCEPT_RETRY_DELAY / 2
            raise

    def _refuse_some(self) -> None:
        """Answer 503 to the connections waiting to be accepted, closing each at once, `_REFUSED_AT_ONCE` at most.

        Raises:
            BlockingIOError: none is left to accept (what accept() raises then).
            ConnectionAbortedError: some may be left (asyncio tries again on its next turn).
        """
        for _ in range(_REFUSED_AT_ONCE):
            conn, _ = self._accepted()
            with conn, suppress(OSError):  # OSError: the caller is gone
                conn.send(_REFUSED)
            self.admission.closed_at_cap("refused with 503: every connection has its request")
        raise ConnectionAbortedError


def listener(sock: socket.socket, admission: Admission) -> socket.socket:
    """`sock`, a listening socket, as one that keeps to the cap of `admission` (`sock` itself is left closed)."""
    wrapped = _Listener(sock.family, sock.type, sock.proto, fileno=sock.detach())
    wrapped.admission = admission
    return wrapped


class BoundedH11(H11Protocol):
    """uvicorn's h11 protocol, giving each request a time limit to arrive whole. `admission` is set by a subclass
    for each server (`bounded_h11`)."""

    admission: ClassVar[Admission]
    _deadline: asyncio.TimerHandle | None = None
    _due = 0.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._follow(0)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow(len(data))

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._stop_waiting()

    def evict(self) -> None:
        """Close the connection now, without an answer."""
        self._stop_waiting()
        self.transport.abort()

    def _follow(self, received: int) -> None:
        """Start, extend or stop the time limit after `received` bytes, as the request now stands."""
        if self.transport.is_closing() or self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):
            self._stop_waiting()  # the request is whole (or the connection done with): it may take its time now
            return
        if self._deadline is None:
            self._due = self.loop.time() + REQUEST_TIMEOUT
            self.admission.waiting[self] = None
        else:
            self._deadline.cancel()
        self._due += received / MIN_BODY_RATE
        self._deadline = self.loop.call_at(self._due, self._timed_out)

    def _stop_waiting(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self.admission.waiting.pop(self, None)

    def _timed_out(self) -> None:
        self._deadline = None
        self._stop_waiting()
        if self.transport.is_closing():
            return
        if self.conn.their_state is h11.IDLE and (self.cycle is None or self.cycle.response_complete):
            self.transport.write(_TOO_SLOW)
        self.transport.close()


def bounded_h11(admission: Admission) -> type[BoundedH11]:
    """`BoundedH11` for a server whose listening sockets share `admission`."""

    class ForServer(BoundedH11):
        pass

    ForServer.admission = admission
    return ForServer
