"""Serving an ASGI app (our MCP front: front.http.app) with uvicorn, stopped by cancellation.

uvicorn's own signal handling does not fit a server that must stop its children before it exits: after a graceful
stop it raises the signal again (a KeyboardInterrupt traceback, death by signal instead of exit code 128 + N), and a
second SIGINT sets its `force_exit`, which skips the lifespan shutdown where the children are stopped. Here uvicorn
catches no signal; the command line's `_until_signalled` does, and cancels `serve_http`, which then tells uvicorn to
stop and waits, shielded, until it has: requests in flight are given `STOP_GRACE`, then the lifespan stops the children.

The listening sockets and uvicorn's HTTP protocol come bounded from `front.http.limits`: connections under a cap below
the process's file limit, each request given a time to arrive whole, the accept loop resting when out of descriptors.

uvicorn's access log names each request by its path only (`_PathOnly`): a query is the client's to fill, and may hold
what must not be written down (`?access_token=` from a client that should have sent a header, the console's one-time
sign-in code, the OAuth callback's code and state).
"""

from __future__ import annotations

import logging
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
import uvicorn
from starlette.types import ASGIApp

from meta_agent.front.http.limits import Accepting, Admission, BoundedH11, bounded_h11
from meta_agent.shared.urls import loggable_url

# Requests still running when a stop begins get this long to finish before they are cancelled: an open SSE stream (a
# 2025-11-25 caller's GET) or a long run would otherwise hold the stop, and the children's with it, forever.
STOP_GRACE = 2  # whole seconds: uvicorn takes an int


class _PathOnly(logging.Filter):
    """uvicorn's access lines with each argument a `loggable_url`: the request target (`/mcp?access_token=x`) cut to
    its path. Every string argument is cut, not the target's position in uvicorn's format: the client's address and
    the HTTP version hold neither `?` nor `#` and come out as they were."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(loggable_url(arg) if isinstance(arg, str) else arg for arg in record.args)
        return True


_PATH_ONLY = _PathOnly()  # one filter, added once however many servers a process starts


class StartupFailed(Exception):
    """The app's lifespan failed to start; uvicorn has logged why."""


class _Server(uvicorn.Server):
    """uvicorn's server, leaving the signals to its caller, and accepting connections with an accept loop of ours
    (`limits.Accepting`) where the event loop can watch a socket (not Windows', which keeps uvicorn's own)."""

    def __init__(self, config: uvicorn.Config, http: type[BoundedH11]) -> None:
        super().__init__(config)
        self._http = http  # config's http_protocol_class, typed; its `admission` is the sockets' too

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        if sys.platform == "win32" or not sockets:
            await super().startup(sockets)
            return
        await super().startup([])  # the lifespan's startup, and no socket of uvicorn's own

        def protocol() -> BoundedH11:
            return self._http(config=self.config, server_state=self.server_state, app_state=self.lifespan.state)

        backlog = self.config.backlog
        self.servers = [Accepting(sock, self._http.admission, protocol, backlog) for sock in sockets]  # type: ignore[misc]

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve_http(app: ASGIApp, sockets: list[socket.socket]) -> None:
    """Serve `app` on the listening `sockets` until cancelled; then stop serving and run the app's lifespan shutdown
    before returning (or raising the cancellation). The sockets are taken over (left closed).

    Raises:
        StartupFailed: the app's lifespan failed to start.
    """
    logging.getLogger("uvicorn.access").addFilter(_PATH_ONLY)
    # uvicorn's own limit_concurrency is not set: it answers 503 only to a request that has arrived whole, which a
    # connection holding a descriptor need never send; the admission caps connections as they are accepted.
    http = bounded_h11(Admission())
    config = uvicorn.Config(app, http=http, log_config=None, lifespan="on", timeout_graceful_shutdown=STOP_GRACE)
    server = _Server(config, http)
    failed = False
    async with anyio.create_task_group() as tg:
        tg.start_soon(_stop_when_cancelled, server)
        with anyio.CancelScope(shield=True):
            try:
                await server.serve(sockets=sockets)
            except SystemExit:  # how uvicorn ends a failed startup
                failed = True
        tg.cancel_scope.cancel()
    if failed:  # raised here, not wrapped in the task group's exception group
        raise StartupFailed


async def _stop_when_cancelled(server: uvicorn.Server) -> None:
    try:
        await anyio.sleep_forever()
    finally:
        server.should_exit = True  # uvicorn's main loop sees it within 0.1 s and begins its shutdown
