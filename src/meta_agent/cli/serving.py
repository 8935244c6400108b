"""`meta-agent serve`: MCP on stdio, or streamable HTTP on sockets bound before anything starts.

Imported only by that command: the MCP front it starts brings the MCP SDK's server with it.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING

import anyio
import structlog

from meta_agent.cli.terminal import EXIT_FAILED, EXIT_USAGE, fail, note
from meta_agent.config.servers import ServerEntry
from meta_agent.config.settings import Settings
from meta_agent.errors import ConfigError
from meta_agent.records.otel_setup import exported
from meta_agent.shared.heap import settle_for_serving
from meta_agent.shared.unimported import WITHOUT_HTTP_SERVER, hidden

MAX_PORT = 65535
LISTEN_BACKLOG = 2048  # uvicorn's default: connections queue here while the server is still starting up

if TYPE_CHECKING:
    from meta_agent.front.server import MetaAgentServer

# The signal that reloads servers.json while serving (there is none on Windows, where a change to the file still does).
RELOAD_SIGNAL: signal.Signals | None = None if sys.platform == "win32" else signal.SIGHUP

log = structlog.get_logger(__name__)


@exported
async def serve_on_stdio(args: argparse.Namespace, settings: Settings, servers: dict[str, ServerEntry]) -> int:
    """Serve MCP on stdin and stdout until the host closes stdin or a signal stops it."""
    with hidden(*WITHOUT_HTTP_SERVER):  # (meta_agent.shared.unimported)
        from meta_agent.front.stdio.serve import serve_stdio

    # Where the event loop cannot poll pipes (Windows) the SDK's own transport serves, which cannot tell the answers.
    server = _server(args, settings, servers, hold_children=sys.platform != "win32")
    settle_for_serving()  # (meta_agent.shared.heap)
    async with _reloading_on_hangup(server), _watched(server, settings):
        await serve_stdio(server)
    return 0


@exported
async def serve_on_http(args: argparse.Namespace, settings: Settings, servers: dict[str, ServerEntry]) -> int:
    """Serve streamable HTTP at /mcp on `--host` and `--port`; a port that cannot be listened on is exit 2."""
    from meta_agent.front.auth.resource_server import resource_server
    from meta_agent.front.http.app import console_of, http_app
    from meta_agent.front.http.serve import StartupFailed, serve_http

    try:
        server = _server(args, settings, servers)
        app = http_app(
            server,
            host=args.host,
            token=settings.http_token,
            allowed_hosts=tuple(args.allowed_host),
            auth=resource_server(settings, resource_url=_resource_url(args.host, args.port)),
            ui_client_id=settings.ui_client_id,
        )
        # Bound before anything starts, so a port that is taken is one line, not a started and stopped server.
        sockets = _listening_sockets(args.host, args.port)
    except ConfigError as exc:
        return fail(str(exc), EXIT_USAGE)
    host, port = sockets[0].getsockname()[:2]
    settle_for_serving()  # (meta_agent.shared.heap)
    log.info("serving_http", url=f"http://{f'[{host}]' if ':' in host else host}:{port}/mcp")
    link = console_of(app).sign_in_link(_base_url(args.host, port))
    if link is not None:  # the code is a credential: said to the operator's terminal, never to the log
        note(f"sign in to the web console (once, within 10 minutes): {link}")
    try:
        async with _reloading_on_hangup(server), _watched(server, settings):
            await serve_http(app, sockets)
    except StartupFailed:
        return fail("serve: the server failed to start (the log above says why)", EXIT_FAILED)
    return 0


def _server(
    args: argparse.Namespace, settings: Settings, servers: dict[str, ServerEntry], *, hold_children: bool = False
) -> MetaAgentServer:
    """The server `serve` runs, over the files and the problem its command line named."""
    from meta_agent.front.server import build_server

    return build_server(
        settings,
        servers,
        os.environ,
        trust_file=args.trust_file,
        config_file=args.config,
        config_problem=args.config_problem,
        hold_children=hold_children,
    )


def _base_url(host: str, port: int) -> str:
    """`http://HOST:PORT` as a browser on this machine reaches the server (a wildcard address by 127.0.0.1)."""
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


def _resource_url(host: str, port: int) -> str | None:
    """`http://HOST:PORT/mcp` of the listen address: the audience of OAuth access tokens unless one is configured;
    None for a wildcard address or port 0, which name no resource."""
    if host in ("", "0.0.0.0", "::") or port == 0:
        return None
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/mcp"


def _watched(server: MetaAgentServer, settings: Settings) -> AbstractAsyncContextManager[None]:
    """The stall watchdog over the serving (cli/watchdog.py), told what the server's runs are doing."""
    from meta_agent.cli.watchdog import watching_the_loop
    from meta_agent.records.traces import default_trace_dir

    def in_progress() -> list[str]:
        engine = server.engine
        return [] if engine is None else engine.runs.in_progress()

    return watching_the_loop(settings.stall_seconds, in_progress, settings.trace_dir or default_trace_dir())


def keep_reload_signal(stops: tuple[signal.Signals, ...]) -> tuple[signal.Signals, ...]:
    """The signals of `stops` that stop `serve`: all but RELOAD_SIGNAL, which is ignored from now on, so that it
    is never fatal, and reloads servers.json while the server runs (`_reloading_on_hangup`)."""
    if RELOAD_SIGNAL is None:
        return stops
    signal.signal(RELOAD_SIGNAL, signal.SIG_IGN)
    return tuple(signum for signum in stops if signum != RELOAD_SIGNAL)


@asynccontextmanager
async def _reloading_on_hangup(server: MetaAgentServer) -> AsyncIterator[None]:
    """While inside: each SIGHUP reloads the server's servers.json (it is ignored while there is no engine, before
    the children start and after they stop). Where there is no SIGHUP (Windows), the file's changes still count."""
    if RELOAD_SIGNAL is None:
        yield
        return

    async def reload_on_hangup(hangups: AsyncIterator[int]) -> None:
        async for _ in hangups:
            if server.engine is not None:
                log.info("reload_requested", signal=RELOAD_SIGNAL.name)
                server.engine.toolbox.request_reload()

    try:
        with anyio.open_signal_receiver(RELOAD_SIGNAL) as hangups:
            async with anyio.create_task_group() as tg:
                tg.start_soon(reload_on_hangup, hangups)
                yield
                tg.cancel_scope.cancel()
    finally:
        signal.signal(RELOAD_SIGNAL, signal.SIG_IGN)  # closing the receiver made it fatal again


def _listening_sockets(host: str, port: int) -> list[socket.socket]:
    """A listening socket on each address of `host` (one with IPv4 and IPv6 for localhost; `::` takes both).

    Raises:
        ConfigError: the port is out of range, the host does not resolve, or an address cannot be listened on (the
        port is taken, the address is not this machine's, or the port is privileged).
    """
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if not 0 <= port <= MAX_PORT:
        raise ConfigError(f"--port: {port} is not a port number (0 to {MAX_PORT})")
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"--host: cannot resolve {host!r}: {exc.strerror}") from None
    # An IPv4 address of the host gets a socket of its own; without one, an IPv6 socket also takes IPv4 (`::`).
    with_ipv4 = any(family == socket.AF_INET for family, *_ in addresses)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in addresses:
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            _exclusive_port(sock)
            if family == socket.AF_INET6:
                _only_ipv6(sock, with_ipv4)
            try:
                sock.bind(address)
            except OSError as exc:
                if exc.errno != errno.EADDRNOTAVAIL or len(addresses) == 1:
                    raise
                sockets.pop().close()  # that family is not enabled here (a container without IPv6)
                continue
            sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        option = "--host" if exc.errno == errno.EADDRNOTAVAIL else "--port"
        raise ConfigError(f"{option}: cannot listen on {where}: {(exc.strerror or str(exc)).lower()}") from None
    if not sockets:
        raise ConfigError(f"--host: cannot listen on {where}: none of its addresses is this machine's")
    return sockets


def _exclusive_port(sock: socket.socket) -> None:
    """Binding fails on a port another socket listens on, but a restart need not wait out TIME_WAIT."""
    if sys.platform == "win32":
        # There SO_REUSEADDR lets a bind succeed on a port another server listens on; this makes it fail instead.
        # No test covers it: the tests run on Linux only.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_EXCLUSIVEADDRUSE, 1)
    else:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)


def _only_ipv6(sock: socket.socket, only: bool) -> None:
    """Set IPV6_V6ONLY either way: the default differs between systems (on Windows, IPv6 only)."""
    try:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, int(only))
    except OSError:
        if only:
            raise  # else a system without dual-stack sockets (OpenBSD): the socket stays IPv6-only
