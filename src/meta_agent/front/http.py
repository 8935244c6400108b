"""Serving an ASGI app (our MCP front: front.http_app) with uvicorn, stopped by cancellation.

uvicorn's own signal handling does not fit a server that must stop its children before it exits: after a graceful
stop it raises the signal again (a KeyboardInterrupt traceback, death by signal instead of exit code 128 + N), and a
second SIGINT sets its `force_exit`, which skips the lifespan shutdown where the children are stopped. Here uvicorn
catches no signal; the command line's `_until_signalled` does, and cancels `serve_http`, which then tells uvicorn to
stop and waits, shielded, until it has: requests in flight are given `STOP_GRACE`, then the lifespan stops the children.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
import uvicorn
from starlette.types import ASGIApp

# Requests still running when a stop begins get this long to finish before they are cancelled: an open SSE stream (a
# 2025-11-25 caller's GET) or a long run would otherwise hold the stop, and the children's with it, forever.
STOP_GRACE = 2  # whole seconds: uvicorn takes an int


class StartupFailed(Exception):
    """The app's lifespan failed to start; uvicorn has logged why."""


class _Server(uvicorn.Server):
    """uvicorn's server, leaving the signals to its caller."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve_http(app: ASGIApp, sockets: list[socket.socket]) -> None:
    """Serve `app` on the listening `sockets` until cancelled; then stop serving and run the app's lifespan shutdown
    before returning (or raising the cancellation).

    Raises:
        StartupFailed: the app's lifespan failed to start.
    """
    server = _Server(uvicorn.Config(app, log_config=None, lifespan="on", timeout_graceful_shutdown=STOP_GRACE))
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
