"""The requests session the OTLP/HTTP exporters post with (records/otel_sdk.py): each request is over within its
timeout, all of it, and reads a bounded answer.

requests, and urllib3 under it, bound each operation on the socket by the timeout, not the request: a collector that
accepts an export and then answers one byte at a time, each byte within the timeout, would hold the exporter's thread
for as long as it liked (a head of a hundred lines of 64 KiB each is still an answer). Here the timeout the exporter
gives a request is a deadline for the whole of it: connecting, the TLS handshake, sending, the answer's head and
body. When it passes, a timer shuts the request's socket down, which ends at once a read or a write blocked on it,
and the request fails as a ReadTimeout, a connection error to the exporter, whose own deadline (the same) has then
passed too: the batch is given up, and the next one starts on a new connection. The exporters need the answer's
status only, so at most ANSWER_BYTES of its body are read.

Imported with the SDK only (records/otel_sdk.py), when an exporter is configured.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from contextvars import ContextVar
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.poolmanager import PoolManager, ProxyManager

# The most of a collector's answer read: the exporters need its status only (and a small protobuf at most), and an
# answer of hundreds of MB, or an endless one, would otherwise be read whole into memory.
ANSWER_BYTES = 64 * 1024
# The least a socket is left to wait when the deadline has all but passed: zero would make it non-blocking.
LEAST_WAIT_S = 0.001


class Deadline:
    """When a request must be over: at `seconds` from now, the sockets it watches are shut down, unless it is
    `ended` first. The timer is a thread of its own, because the request's thread is the one blocked."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._at = time.monotonic() + seconds
        self._lock = threading.Lock()  # after `ended` returns, no socket is shut down any more
        self._sockets: list[socket.socket] = []
        self.passed = False
        self._over = False
        self._timer = threading.Timer(seconds, self._pass)
        self._timer.daemon = True
        self._timer.start()

    def left(self) -> float:
        return max(self._at - time.monotonic(), LEAST_WAIT_S)

    def watch(self, sock: socket.socket) -> None:
        """Shut `sock` down when the deadline passes; at once if it has."""
        with self._lock:
            if self.passed:
                _shut(sock)
            elif not self._over:
                self._sockets.append(sock)

    def ended(self) -> None:
        with self._lock:
            self._over = True
            self._sockets.clear()
        self._timer.cancel()

    def _pass(self) -> None:
        with self._lock:
            if self._over:
                return
            self.passed = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # closed already, or never connected
        # socket.socket's own shutdown, also for a TLS socket: it ends a read blocked in another thread
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


_deadline: ContextVar[Deadline | None] = ContextVar("otlp_request_deadline", default=None)


class _Bounded(HTTPConnection):
    """urllib3's connection, held to the deadline of the request its thread is making (if any)."""

    def _new_conn(self) -> socket.socket:
        # urllib3 makes each connection's socket here, before any TLS: a handshake must finish in what is left
        sock = super()._new_conn()
        if (deadline := _deadline.get()) is not None:
            sock.settimeout(deadline.left())
        return sock

    def request(self, *args: Any, **kwargs: Any) -> None:
        deadline = _deadline.get()
        if deadline is not None:
            if self.sock is None:
                self.connect()
            assert self.sock is not None
            deadline.watch(self.sock)  # a new connection's, or a kept one's
        super().request(*args, **kwargs)


class _BoundedTls(_Bounded, HTTPSConnection):
    pass


class _Pool(HTTPConnectionPool):
    ConnectionCls = _Bounded


class _TlsPool(HTTPSConnectionPool):
    ConnectionCls = _BoundedTls


_POOLS: dict[str, type[HTTPConnectionPool]] = {"http": _Pool, "https": _TlsPool}


class _BoundedAdapter(HTTPAdapter):
    """requests' adapter, its connections (direct, or through an HTTP proxy of HTTPS_PROXY) held to deadlines. A
    SOCKS proxy's connections are urllib3's own, bounded only by the timeout of each read."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _POOLS

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> PoolManager:
        manager: PoolManager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if isinstance(manager, ProxyManager):
            manager.pool_classes_by_scheme = _POOLS
        return manager


class BoundedSession(requests.Session):
    """A requests session for the OTLP/HTTP exporters: a request's `timeout` (seconds, as the exporters pass it)
    bounds the whole request, at most ANSWER_BYTES of an answer are read, and the CA the exporter was given (its
    `verify`) is the one trusted."""

    def __init__(self) -> None:
        super().__init__()
        bounded = _BoundedAdapter()
        self.mount("http://", bounded)
        self.mount("https://", bounded)

    def request(self, *args: Any, **kwargs: Any) -> requests.Response:
        seconds = kwargs.get("timeout")
        deadline = Deadline(float(seconds)) if isinstance(seconds, int | float) else None
        kwargs["stream"] = True
        # The exporters set the session's `verify` from OTEL_EXPORTER_OTLP_CERTIFICATE; requests would let a
        # REQUESTS_CA_BUNDLE of the environment win over a session's own, but not over the request's.
        kwargs.setdefault("verify", self.verify)
        token = _deadline.set(deadline)
        try:
            response = super().request(*args, **kwargs)
            try:
                response._content = next(response.iter_content(ANSWER_BYTES), b"")[:ANSWER_BYTES]
            finally:
                response.close()  # the rest is never read: the connection is dropped, not pooled
        except (requests.RequestException, OSError) as exc:
            if deadline is not None and deadline.passed:
                raise requests.exceptions.ReadTimeout(f"no whole answer within {deadline.seconds:.3f} s") from exc
            raise
        finally:
            _deadline.reset(token)
            if deadline is not None:
                deadline.ended()
        return response
