"""The `meta-agent` command line.

Exit codes: 0 success; 1 a check or a run failed; 2 bad input (config, settings, arguments, no model); 128 + N
stopped by signal N (130 for Ctrl-C, 143 for SIGTERM), whether or not the host keeps our stdin open, and always after
every child's whole process group has been ended.
"""

from __future__ import annotations

import argparse
import base64
import errno
import fnmatch
import json
import math
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import anyio
import structlog

from meta_agent import __version__, trustfile
from meta_agent.children import START_TIMEOUT, ChildPool
from meta_agent.config import ServerEntry, Settings, load_servers, load_settings
from meta_agent.engine import Engine
from meta_agent.errors import ConfigError, MetaAgentError, ModelNotConfigured, PatternError, summary
from meta_agent.stdio_child import running_children
from meta_agent.terminal import LiveView, check_line, paint_for, plural, print_toolbox
from meta_agent.text import one_line
from meta_agent.toolbox import Toolbox, definition_of
from meta_agent.tracing import configure_logging, default_trace_dir
from meta_agent.trustfile import LEVELS, trust_path

if TYPE_CHECKING:
    from meta_agent.runs import Listing

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_SIGNALLED = 128  # plus the signal number
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
TASK_SHOWN = 60  # characters of a run's task in the `runs` listing
RUNS_NAMED = 3  # unreadable trace files named in `runs`; the count says how many more
MAX_PORT = 65535
LISTEN_BACKLOG = 2048  # uvicorn's default: connections queue here while the server is still starting up

log = structlog.get_logger("meta_agent.cli")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line, not argparse's usage block."""
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: an option given before the command is not reset by the command's own parser.
    common.add_argument(
        "--config",
        type=Path,
        default=argparse.SUPPRESS,
        help="servers.json to use (default: $META_AGENT_CONFIG, else ./servers.json)",
    )
    common.add_argument(
        "--log-level", choices=["debug", "info", "warning", "error"], default=argparse.SUPPRESS, help="log level"
    )
    parser = _Parser(prog="meta-agent", description="An MCP server that is itself an agent.", parents=[common])
    parser.add_argument("--version", action="version", version=f"meta-agent {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    serve = commands.add_parser("serve", parents=[common], help="serve MCP on stdio (default) or streamable HTTP")
    serve.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP: address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765, help="HTTP: port (default 8765)")
    serve.add_argument(
        "--allowed-host", action="append", default=[], metavar="HOST", help="HTTP: another Host header to accept"
    )

    run = commands.add_parser("run", parents=[common], help="run one task in-process; the answer goes to stdout")
    run.add_argument("task")
    run.add_argument("--mode", choices=["ask", "plan", "agent"], default="agent")
    run.add_argument("--tools", nargs="+", metavar="PATTERN", help="glob patterns over tool names")
    run.add_argument("--max-steps", type=_positive, metavar="N")
    run.add_argument("--json", action="store_true", help="print the structured result as JSON")

    trust = commands.add_parser(
        "trust", parents=[common], help="record a trust level for tools (kept beside the config); list what is recorded"
    )
    trust.add_argument(
        "pattern", nargs="?", metavar="TOOL", help="a namespaced tool name or glob (pg.execute_sql, pg.*)"
    )
    trust.add_argument("level", nargs="?", choices=[*LEVELS, "forget"], help="never, ask, always, or forget")

    tools = commands.add_parser("tools", parents=[common], help="the toolbox: each child's tools, status and trust")
    tools.add_argument("--json", action="store_true", help="print the toolbox as JSON")
    runs = commands.add_parser("runs", parents=[common], help="recent runs from their traces; `runs show ID` tells one")
    runs.add_argument("show", nargs="?", choices=["show"], help="show one run step by step")
    runs.add_argument("run_id", nargs="?", metavar="RUN_ID")
    check = commands.add_parser(
        "check", parents=[common], help="validate servers.json, start every child and report; exit 1 if any fails"
    )
    for sub in (tools, check, trust):
        sub.add_argument(
            "--start-timeout",
            type=_seconds,
            default=START_TIMEOUT,
            metavar="SECONDS",
            help=f"how long a child may take to start (default {START_TIMEOUT:g})",
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (the console script exits with it)."""
    args = _parser().parse_args(argv)
    args.config = getattr(args, "config", None)
    if args.command == "runs":
        return _quietly_on_a_closed_pipe(_runs, args)
    if args.command == "trust" and args.pattern is not None and args.level is None:
        return _fail("trust: give a level after the tool: never, ask, always or forget", EXIT_USAGE)
    try:
        settings = load_settings()
        args.config = args.config or settings.config
        servers = load_servers(args.config, os.environ)
        settings.enabled_internal_tools(["image_gen"])  # an unknown name is bad input: say so before starting
        args.trust_file = trust_path(args.config)
        if args.command != "tools":  # likewise a broken trust file; `tools` shows what it does to the levels
            trustfile.load(args.trust_file)
    except ConfigError as exc:
        return _fail(str(exc), EXIT_USAGE)
    default_level = "info" if args.command == "serve" else "warning"
    configure_logging(getattr(args, "log_level", None) or settings.log_level or default_level)
    serve = _serve_http if getattr(args, "transport", None) == "http" else _serve_stdio
    command = {"serve": serve, "run": _run, "tools": _tools, "check": _check, "trust": _trust}[args.command]
    return _quietly_on_a_closed_pipe(anyio.run, _until_signalled, command, args, settings, servers)


def _quietly_on_a_closed_pipe(function: Callable[..., int], *args: Any) -> int:
    try:
        return function(*args)
    except BrokenPipeError:
        # The reader went away (`meta-agent tools | head`): nothing more to say, and no traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED


def _fail(message: str, code: int) -> int:
    print(f"meta-agent: {message}", file=sys.stderr)
    return code


async def _until_signalled(command: Callable[..., Awaitable[int]], *args: Any) -> int:
    """Run `command`; the first SIGINT, SIGTERM or SIGHUP cancels it. Signals stay caught until the command has
    finished unwinding, so a second one cannot interrupt the stopping of the children; it says which are left."""
    received: list[int] = []
    result, broken_pipe = 0, False
    with anyio.open_signal_receiver(*SIGNALS) as signals:
        async with anyio.create_task_group() as tg:
            with anyio.CancelScope() as work:

                async def watch() -> None:
                    async for signum in signals:
                        if not received:
                            received.append(signum)
                            work.cancel()
                        else:
                            print(f"meta-agent: {_still_stopping()}", file=sys.stderr)

                tg.start_soon(watch)
                try:
                    result = await command(*args)
                except* BrokenPipeError:  # the reader of our stdout went away, possibly inside a task group
                    broken_pipe = True
            tg.cancel_scope.cancel()
    if broken_pipe:
        raise BrokenPipeError
    if received:
        print(f"meta-agent: stopped by {signal.Signals(received[0]).name}", file=sys.stderr)
        return EXIT_SIGNALLED + received[0]
    return result


def _still_stopping() -> str:
    """What a second signal is told: the children whose processes are still being stopped."""
    left = running_children()
    if left:
        return f"still stopping {plural(len(left), 'child server')}: {', '.join(left)}"
    return "still stopping; no child server process is left"


# -- serve ---------------------------------------------------------------------------------------------------------


async def _serve_stdio(args: argparse.Namespace, settings: Settings, servers: dict[str, ServerEntry]) -> int:
    from meta_agent.server import build_server
    from meta_agent.stdio_front import serve_stdio

    await serve_stdio(build_server(settings, servers, os.environ, trust_file=args.trust_file))
    return 0


async def _serve_http(args: argparse.Namespace, settings: Settings, servers: dict[str, ServerEntry]) -> int:
    from meta_agent.http_front import StartupFailed, serve_http
    from meta_agent.server import build_server, http_app

    try:
        app = http_app(
            build_server(settings, servers, os.environ, trust_file=args.trust_file),
            host=args.host,
            token=settings.http_token,
            allowed_hosts=tuple(args.allowed_host),
        )
        # Bound before anything starts, so a port that is taken is one line, not a started and stopped server.
        sockets = _listening_sockets(args.host, args.port)
    except ConfigError as exc:
        return _fail(str(exc), EXIT_USAGE)
    host, port = sockets[0].getsockname()[:2]
    log.info("serving_http", url=f"http://{f'[{host}]' if ':' in host else host}:{port}/mcp")
    try:
        await serve_http(app, sockets)
    except StartupFailed:
        return _fail("serve: the server failed to start (the log above says why)", EXIT_FAILED)
    return 0


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


# -- run -----------------------------------------------------------------------------------------------------------


async def _run(args: argparse.Namespace, settings: Settings, servers: dict[str, ServerEntry]) -> int:
    view = LiveView(sys.stderr)
    try:
        async with Engine(settings, servers, os.environ, restart=False, trust_file=args.trust_file) as engine:
            result = await engine.run(
                args.task, mode=args.mode, patterns=args.tools, max_steps=args.max_steps, emit=view
            )
    except (ConfigError, PatternError, ModelNotConfigured) as exc:
        return _fail(str(exc), EXIT_USAGE)
    except MetaAgentError as exc:
        if view.result is None:  # no run started
            return _fail(str(exc), EXIT_FAILED)
        if args.json:  # the failed run's result, stop reason error
            print(json.dumps(view.result.to_json(), indent=2))
        return _fail(f"{exc} (run_id {view.result.run_id}; see meta-agent runs show {view.result.run_id})", EXIT_FAILED)
    except anyio.get_cancelled_exc_class():
        if args.json and view.result is not None:  # what was gathered before the cancel
            print(json.dumps(view.result.to_json(), indent=2))
        raise
    except BrokenPipeError:
        raise  # the reader of our output went away: `main` says nothing more
    except Exception as exc:  # a bug of ours: one line for the user, the traceback at debug level
        log.debug("run_crashed", exc_info=True)
        run = f" (run_id {view.result.run_id})" if view.result is not None else ""
        return _fail(f"failed: {summary(exc)}{run}; --log-level debug shows where", EXIT_FAILED)
    for index, image in enumerate(result.images, 1):
        path = Path(f"meta-agent-{result.run_id}-{index}.{image.mime_type.split('/')[-1]}")
        path.write_bytes(base64.b64decode(image.data))
        print(f"meta-agent: wrote {path}", file=sys.stderr)
    print(json.dumps(result.to_json(), indent=2) if args.json else result.answer)
    return 0


# -- tools and check -----------------------------------------------------------------------------------------------


async def _tools(args: argparse.Namespace, settings: Settings, servers: dict[str, ServerEntry]) -> int:
    engine = Engine(
        settings, servers, os.environ, restart=False, start_timeout=args.start_timeout, trust_file=args.trust_file
    )
    async with engine:
        await engine.pool.wait_settled()
        if args.json:
            print(json.dumps(engine.describe(), indent=2))
        else:
            print_toolbox(engine.toolbox(), engine.pool, sys.stdout, engine.withheld)
    if engine.trust_problem:  # bad input, though the toolbox above shows the levels that apply meanwhile
        return _fail(engine.trust_problem, EXIT_USAGE)
    return 0


async def _check(args: argparse.Namespace, settings: Settings, servers: dict[str, ServerEntry]) -> int:
    out = sys.stdout
    paint = paint_for(out)
    print(f"{args.config}: {plural(len(servers), 'server')}", file=out, flush=True)
    width = max((len(name) for name in servers), default=0)
    failed: list[str] = []
    async with ChildPool(servers, restart=False, start_timeout=args.start_timeout) as pool:
        for child in pool:  # in file order, each line as soon as its child has started or failed
            await child.settled.wait()
            status = child.status
            print(f"  {child.name.ljust(width)}  {check_line(status, paint)}", file=out, flush=True)
            if status.state == "failed":
                failed.append(child.name)
        problems = Toolbox.build([], pool).problems
    for problem in problems:
        print(f"  problem: {problem}", file=out)
    if failed:
        print(f"{len(failed)} of {len(servers)} failed: {', '.join(failed)}", file=out)
        return EXIT_FAILED
    return 0


# -- runs ----------------------------------------------------------------------------------------------------------


def _runs(args: argparse.Namespace) -> int:
    """Recent runs, or one run told step by step; read from the trace files, no children started. What cannot be
    read is skipped and counted on stderr."""
    from meta_agent import runs  # its record models cost every other command's start

    try:
        settings = load_settings()
        directory = settings.trace_dir or default_trace_dir(os.environ)
        if args.show:
            if not args.run_id:
                return _fail("runs show: give a RUN_ID (see `meta-agent runs`)", EXIT_USAGE)
            trace = runs.read(directory, args.run_id)
            print("\n".join(runs.account(trace)))
            if trace.skipped:
                _note(f"runs show: {plural(trace.skipped, 'unreadable record')} skipped in {args.run_id}.jsonl")
            return 0
        listing = runs.recent(directory)
    except ConfigError as exc:
        return _fail(str(exc), EXIT_USAGE)
    print(f"{directory}: {plural(len(listing.runs), 'recent run')}")
    for run in listing.runs:
        seconds = f"{run.seconds:.2f} s" if run.seconds is not None else "?"
        task = one_line(run.task, TASK_SHOWN)
        print(
            f"  {run.run_id}  {run.started[:19]}  {run.mode:<5}  {run.stop_reason:<12}  "
            f"{plural(run.steps, 'step'):<8}  {run.tokens:>7} tokens  {seconds:>8}  {task}"
        )
    if listing.skipped_files or listing.skipped_records:
        _note(f"runs: {_skipped(listing)}")
    return 0


def _skipped(listing: Listing) -> str:
    """E.g. "2 unreadable traces and 1 unreadable record skipped (x.jsonl, y.jsonl)"."""
    files = listing.skipped_files
    counts = [plural(len(files), "unreadable trace")] if files else []
    counts += [plural(listing.skipped_records, "unreadable record")] if listing.skipped_records else []
    names = ", ".join(files[:RUNS_NAMED]) + (", ..." if len(files) > RUNS_NAMED else "")
    return f"{' and '.join(counts)} skipped" + (f" ({names})" if names else "")


def _note(message: str) -> None:
    print(f"meta-agent: {message}", file=sys.stderr)


# -- trust ---------------------------------------------------------------------------------------------------------


async def _trust(args: argparse.Namespace, settings: Settings, servers: dict[str, ServerEntry]) -> int:
    """Record a level for the tools a pattern matches, with their definitions' hashes; or list what is recorded."""
    path: Path = args.trust_file
    recorded = trustfile.load(path)
    if args.level == "forget":
        gone = [name for name in recorded if fnmatch.fnmatchcase(name, args.pattern)]
        if not gone:
            return _fail(f"trust: nothing recorded matches {args.pattern!r} in {path}", EXIT_USAGE)
        trustfile.save(path, {name: r for name, r in recorded.items() if name not in gone})
        print(f"forgot {', '.join(gone)}")
        return 0
    # The tools as their servers define them now, without recorded levels in the way.
    engine = Engine(settings, servers, os.environ, restart=False, start_timeout=args.start_timeout)
    async with engine:
        await engine.pool.wait_settled()
        current = {spec.name: spec for spec in engine.toolbox().tools}
        statuses = {child.name: child.status for child in engine.pool}
    if args.pattern is None:
        _print_recorded(path, recorded, current, statuses)
        return 0
    chosen = [spec for name, spec in current.items() if fnmatch.fnmatchcase(name, args.pattern)]
    if not chosen:
        return _fail(f"trust: {args.pattern!r} matches no tool (see `meta-agent tools`)", EXIT_USAGE)
    for spec in chosen:
        definition = definition_of(spec)
        recorded[spec.name] = trustfile.Recorded(level=args.level, definition=definition, recorded=trustfile.now())
    trustfile.save(path, recorded)
    print(f"{args.level}: {', '.join(spec.name for spec in chosen)} (recorded in {path})")
    return 0


def _print_recorded(path: Path, recorded: dict[str, Any], current: dict[str, Any], statuses: dict[str, Any]) -> None:
    print(f"{path}: {plural(len(recorded), 'recorded level')}")
    width = max((len(name) for name in recorded), default=0)
    for name, entry in sorted(recorded.items()):
        spec = current.get(name)
        if spec is None:
            server = statuses.get(name.split(".", 1)[0])
            why = f" (server {server.state}: {server.error})" if server is not None and server.error else ""
            state = f"not applied: no such tool now{why}"
        elif definition_of(spec) != entry.definition:
            state = "not applied: the tool changed since; record it again to trust it"
        else:
            state = "applies"
        print(f"  {name.ljust(width)}  {entry.level.ljust(6)}  {entry.recorded}  {state}")
