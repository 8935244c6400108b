"""Bounds on what the HTTP front's connections may hold (README, Commands: `serve --transport http`), for
`front.http.serve`: a cap on the connections open at once below the process's file limit, a time limit for a request
to arrive whole, and an accept loop that rests when the process is out of descriptors.

uvicorn bounds none of these: its `limit_concurrency` answers 503 to a request that has arrived whole (a connection
that sends half a request counts against nothing), its `timeout_keep_alive` runs only between requests (and a byte
of the next one stops it), and h11 bounds a request's head in size (16 KB), not in time. Nor does asyncio's accept
loop (Python 3.11): it goes on calling accept() after EMFILE, up to the listen backlog's count each time the socket
is ready, and schedules a retry for each failure (tens of thousands of failed calls a second).

So the accept loop is ours (`Accepting`): it waits for the listening socket to be readable (`add_reader`), accepts,
and hands each connection to the event loop (`connect_accepted_socket`), relying on no private behaviour of asyncio.
It rests for `ACCEPT_RETRY_DELAY` after an accept that failed, and keeps the connections open under the cap: a
connection past it takes the place of the one that has waited longest for its request to arrive whole (the likeliest
to be one that never will), or, when every connection has its request, is answered 503. `BoundedH11` gives each
request `REQUEST_TIMEOUT` seconds to arrive, and more as its body arrives (at `MIN_BODY_RATE`); then 408.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import Callable
from contextlib import suppress
from typing import ClassVar

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
# Seconds the accept loop rests after an accept() that failed, which is most likely for want of descriptors (asyncio's
# own delay): the connections already open may end meanwhile and give theirs back.
ACCEPT_RETRY_DELAY = 1.0
_ACCEPTED_AT_ONCE = 128  # connections accepted (or refused) in one turn of the event loop; other work runs between
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
    """What the listening sockets and the connections of one server share: how many connections are open (counted
    from their accept to their close, or their eviction), and those waiting for a request to arrive whole, the
    longest waiting first."""

    def __init__(self) -> None:
        self.open = 0
        self.waiting: dict[BoundedH11, None] = {}

    def full(self) -> bool:
        """Whether the connections open are as many as the cap."""
        return self.open >= connection_cap()

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


class Accepting:
    """The accept loop of one listening socket (taken over: closed by `close`; its queue made `backlog` long), handing
    each connection it accepts to a protocol of `protocol_factory`, a `BoundedH11`, within the cap of `admission`.
    Stands for the asyncio `Server` that uvicorn would have made, as far as uvicorn uses one (`close`,
    `wait_closed`)."""

    def __init__(
        self, sock: socket.socket, admission: Admission, protocol_factory: Callable[[], BoundedH11], backlog: int
    ) -> None:
        sock.listen(backlog)  # as the event loop's own server would: the socket may have been made with a short one
        self._sock = sock
        self._admission = admission
        self._protocol = protocol_factory
        self._loop = asyncio.get_running_loop()
        self._connecting: set[asyncio.Task[None]] = set()
        self._resting: asyncio.TimerHandle | None = None
        sock.setblocking(False)
        self._loop.add_reader(sock.fileno(), self._ready)

    def close(self) -> None:
        """Stop accepting and close the listening socket; connections already handed on are uvicorn's to end."""
        if self._sock.fileno() == -1:
            return
        if self._resting is not None:
            self._resting.cancel()
        else:
            self._loop.remove_reader(self._sock.fileno())
        self._sock.close()

    async def wait_closed(self) -> None:
        """Until the connections accepted have been handed on (or failed to be)."""
        if self._connecting:
            await asyncio.wait(self._connecting)

    def _ready(self) -> None:
        """The listening socket is readable: accept what waits, for this turn of the loop. A connection past the cap
        takes the place of the one that has waited longest for its request, or, if every connection has its
        request, is answered 503 and closed."""
        for _ in range(_ACCEPTED_AT_ONCE):
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return  # none waits (or the one that did has gone)
            except OSError as exc:  # out of descriptors (EMFILE, ENFILE), of memory, or refused by the system
                self._rest(exc)
                return
            if self._admission.full():
                if not self._admission.evict():
                    with conn, suppress(OSError):  # OSError: the caller is gone
                        conn.send(_REFUSED)
                    self._admission.closed_at_cap("refused with 503: every connection has its request")
                    continue
                # The evicted socket closes on the loop's next turn: this one goes on, the next wait for that turn,
                # so evictions never hold more descriptors open than the cap and one.
                self._hand_on_soon(conn)
                return
            self._hand_on_soon(conn)

    def _hand_on_soon(self, conn: socket.socket) -> None:
        self._admission.open += 1
        task = self._loop.create_task(self._hand_on(conn))
        self._connecting.add(task)
        task.add_done_callback(self._connecting.discard)

    async def _hand_on(self, conn: socket.socket) -> None:
        """`conn` to the event loop's transport and a protocol of its own; its place freed if that fails."""
        try:
            protocol = self._protocol()
        except BaseException:
            conn.close()
            self._admission.open -= 1
            raise
        protocol.admitted = True
        try:
            conn.setblocking(False)
            await self._loop.connect_accepted_socket(lambda: protocol, conn)
        except BaseException as exc:
            conn.close()
            protocol.release()
            if not isinstance(exc, OSError):  # OSError: the caller went before its connection was set up
                raise

    def _rest(self, exc: OSError) -> None:
        """accept() failed (out of descriptors, most likely): stop accepting for ACCEPT_RETRY_DELAY, and say so (a
        line a second at most, however many come: records.log_repeats)."""
        log.warning("http_accept_failed", error=exc.strerror or str(exc), retry_in=ACCEPT_RETRY_DELAY)
        self._loop.remove_reader(self._sock.fileno())
        self._resting = self._loop.call_later(ACCEPT_RETRY_DELAY, self._resume)

    def _resume(self) -> None:
        self._resting = None
        if self._sock.fileno() != -1:
            self._loop.add_reader(self._sock.fileno(), self._ready)


class BoundedH11(H11Protocol):
    """uvicorn's h11 protocol, giving each request a time limit to arrive whole. `admission` is set by a subclass
    for each server (`bounded_h11`)."""

    admission: ClassVar[Admission]
    admitted = False  # counted in `admission.open` until released
    _deadline: asyncio.TimerHandle | None = None
    _due = 0.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._follow(0)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow(len(data))

    def connection_lost(self, exc: Exception | None) -> None:
        try:
            super().connection_lost(exc)
        finally:
            self._stop_waiting()
            self.release()

    def _should_upgrade(self) -> bool:
        """Never: nothing here speaks WebSocket, and an upgraded connection would end under another protocol,
        keeping its place under the cap for good. An upgrade request is answered as the plain request it also is."""
        return False

    def evict(self) -> None:
        """Close the connection now, without an answer; its place is free at once."""
        self._stop_waiting()
        self.release()
        self.transport.abort()

    def release(self) -> None:
        """Give the connection's place under the cap back, once however often it is called."""
        if self.admitted:
            self.admitted = False
            self.admission.open -= 1

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
