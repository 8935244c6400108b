"""The `meta-agent` command line.

Exit codes: 0 success, 1 a check failed, 2 bad input (config, settings, arguments), 128 + N stopped by signal N
(130 for Ctrl-C, 143 for SIGTERM).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

import anyio

from meta_agent import __version__
from meta_agent.children import START_TIMEOUT, ChildPool, ChildServer, ChildStatus
from meta_agent.config import ServerEntry, Settings, load_servers, load_settings
from meta_agent.errors import ConfigError
from meta_agent.image_gen import INTERNAL_TOOLS
from meta_agent.toolbox import InternalTool, Toolbox, ToolSpec
from meta_agent.tracing import configure_logging

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_SIGNALLED = 128  # plus the signal number: 130 for Ctrl-C, 143 for SIGTERM


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line, not argparse's usage block."""
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


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

    tools = commands.add_parser(
        "tools", parents=[common], help="list the toolbox: internal tools and each child's tools with status and trust"
    )
    tools.add_argument("--json", action="store_true", help="print the toolbox as JSON")
    check = commands.add_parser(
        "check", parents=[common], help="validate servers.json, start every child and report; exit 1 if any fails"
    )
    for sub in (tools, check):
        sub.add_argument(
            "--start-timeout",
            type=float,
            default=START_TIMEOUT,
            metavar="SECONDS",
            help=f"how long a child may take to start (default {START_TIMEOUT:g})",
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (the console script exits with it)."""
    args = _parser().parse_args(argv)
    args.config = getattr(args, "config", None)
    args.log_level = getattr(args, "log_level", None)
    try:
        settings = load_settings()
        config = args.config or settings.config
        servers = load_servers(config, os.environ)
        internal = [tool for tool in INTERNAL_TOOLS if tool.name in settings.enabled_internal_tools(_names())]
    except ConfigError as exc:
        print(f"meta-agent: {exc}", file=sys.stderr)
        return EXIT_USAGE
    configure_logging(args.log_level or settings.log_level or "warning")
    command: Callable[..., Awaitable[int]] = {"tools": _tools, "check": _check}[args.command]
    return anyio.run(_until_signalled, command, args, settings, servers, internal)


async def _until_signalled(command: Callable[..., Awaitable[int]], *args: Any) -> int:
    """Run `command`; SIGINT, SIGTERM or SIGHUP cancel it, so every child is stopped before we exit 128+signal."""
    received: list[int] = []
    result = 0
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
                async for signum in signals:
                    received.append(signum)
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(watch)
        result = await command(*args)
        tg.cancel_scope.cancel()
    if received:
        print(f"meta-agent: stopped by {signal.Signals(received[0]).name}", file=sys.stderr)
        return EXIT_SIGNALLED + received[0]
    return result


def _names() -> list[str]:
    return [tool.name for tool in INTERNAL_TOOLS]


async def _tools(args: argparse.Namespace, _settings: Settings, servers: dict[str, ServerEntry], internal: list[InternalTool]) -> int:
    async with ChildPool(servers, restart=False, start_timeout=args.start_timeout) as pool:
        await pool.wait_settled()
        toolbox = Toolbox.build(internal, pool)
        if args.json:
            print(json.dumps(toolbox_json(toolbox, pool), indent=2))
        else:
            print_toolbox(toolbox, pool, sys.stdout)
    return 0


async def _check(args: argparse.Namespace, settings: Settings, servers: dict[str, ServerEntry], internal: list[InternalTool]) -> int:
    out = sys.stdout
    paint = _paint_for(out)
    count = len(servers)
    print(f"{args.config or settings.config}: {count} server{'s' if count != 1 else ''}", file=out, flush=True)
    width = max((len(name) for name in servers), default=0)
    failed: list[str] = []
    async with ChildPool(servers, restart=False, start_timeout=args.start_timeout) as pool:
        for child in pool:  # in file order, each line as soon as its child has started or failed
            await child.settled.wait()
            status = child.status
            print(f"  {child.name.ljust(width)}  {_check_line(status, paint)}", file=out, flush=True)
            if status.state == "failed":
                failed.append(child.name)
        toolbox = Toolbox.build(internal, pool)
    for problem in toolbox.problems:
        print(f"  problem: {problem}", file=out)
    if failed:
        print(f"{len(failed)} of {count} failed: {', '.join(failed)}", file=out)
        return EXIT_FAILED
    return 0


def _check_line(status: ChildStatus, paint: Callable[[str, str], str]) -> str:
    if status.state == "ready":
        seconds = f"{status.start_seconds:.2f} s" if status.start_seconds is not None else ""
        tools = f"{status.tool_count} tool{'s' if status.tool_count != 1 else ''}"
        server = " ".join(filter(None, (status.server_name, status.server_version)))
        return "  ".join(
            filter(None, (paint("ready ", "green"), status.transport, status.protocol_version, tools, seconds, server))
        )
    if status.state == "disabled":
        return paint("disabled", "dim")
    return f"{paint('failed', 'red')}  {status.error}"


def print_toolbox(toolbox: Toolbox, pool: ChildPool, out: TextIO) -> None:
    """The toolbox as a person reads it: internal tools first, then each child with its status and tools."""
    paint = _paint_for(out)
    internal = [spec for spec in toolbox.tools if spec.internal]
    print(paint("internal", "bold") + f" · {len(internal)} tool{'s' if len(internal) != 1 else ''}", file=out)
    _print_tools(internal, out)
    for child in pool:
        status = child.status
        head = paint(child.name, "bold")
        if status.state == "ready":
            specs = [spec for spec in toolbox.tools if spec.server == child.name]
            print(f"{head} · {_check_line(status, paint)}", file=out)
            _print_tools(specs, out)
        else:
            print(f"{head} · {_check_line(status, paint)}", file=out)
    for problem in toolbox.problems:
        print(f"{paint('problem', 'red')}: {problem}", file=out)


def _print_tools(specs: list[ToolSpec], out: TextIO) -> None:
    if not specs:
        return
    name_width = max(len(spec.name) for spec in specs)
    hint_width = max(len(spec.hints.describe()) for spec in specs)
    for spec in specs:
        trust = f"{spec.trust} ({spec.trust_source})"
        print(f"  {spec.name.ljust(name_width)}  {spec.hints.describe().ljust(hint_width)}  {trust}", file=out)


def toolbox_json(toolbox: Toolbox, pool: ChildPool) -> dict[str, Any]:
    """The toolbox as JSON: each child with its status, each tool with names, annotations and trust."""
    return {
        "servers": [_status_json(child) for child in pool],
        "tools": [
            {
                "name": spec.name,
                "alias": spec.alias,
                "server": spec.server,
                "title": spec.hints.title,
                "description": spec.description,
                "annotations": {
                    "readOnlyHint": spec.hints.read_only_hint,
                    "destructiveHint": spec.hints.destructive_hint,
                    "idempotentHint": spec.hints.idempotent_hint,
                    "openWorldHint": spec.hints.open_world_hint,
                },
                "trust": spec.trust,
                "trust_source": spec.trust_source,
                "enabled": True,
            }
            for spec in toolbox.tools
        ],
        "problems": list(toolbox.problems),
    }


def _status_json(child: ChildServer) -> dict[str, Any]:
    status = child.status
    return {
        "name": status.name,
        "transport": status.transport,
        "status": status.state,
        "protocol_version": status.protocol_version,
        "server_info": {"name": status.server_name, "version": status.server_version},
        "tool_count": status.tool_count,
        "start_seconds": status.start_seconds,
        "attempt": status.attempt,
        "restarts": status.restarts,
        "error": status.error,
    }


_COLOURS = {"green": "32", "red": "31", "dim": "2", "bold": "1"}


def _paint_for(out: TextIO) -> Callable[[str, str], str]:
    """ANSI colour on a terminal (unless NO_COLOR is set), plain text otherwise."""
    if out.isatty() and not os.environ.get("NO_COLOR"):
        return lambda text, colour: f"\033[{_COLOURS[colour]}m{text}\033[0m"
    return lambda text, _colour: text
