"""The `meta-agent` command line: its parser, `main`, and how a signal stops a command. The commands themselves are
in cli/serving.py (`serve`), cli/commands.py (`run`, `tools`, `check`, `trust`), cli/runs.py (`runs`) and
cli/install.py (`install`, `uninstall`, `bundle`), each imported only when it runs, so `--help` and bad input answer
without loading the MCP SDK or a vendor SDK.

Exit codes: 0 success; 1 a check or a run failed; 2 bad input (config, settings, arguments, no model); 128 + N
stopped by signal N (130 for Ctrl-C, 143 for SIGTERM), whether or not the host keeps our stdin open, and always after
every child's whole process group has been ended. SIGHUP stops every command but `serve`, which reloads servers.json
on it (cli/serving.py).
"""

from __future__ import annotations

import argparse
import atexit
import math
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, NoReturn

import anyio

from meta_agent.cli.terminal import EXIT_FAILED, EXIT_SIGNALLED, EXIT_USAGE, fail, guard_standard_streams, note
from meta_agent.config.servers import DEFAULT_START_TIMEOUT, SERVER_NAME, Servers, load_servers
from meta_agent.config.settings import load_settings, unknown_settings
from meta_agent.errors import ConfigError, ModelNotConfigured
from meta_agent.records.logs import configure_logging
from meta_agent.shared.text import plural
from meta_agent.shared.unimported import WITHOUT_HTTP_SERVER, hidden
from meta_agent.store import trustfile
from meta_agent.store.trustfile import TRUST_LEVELS, trust_path
from meta_agent.version import __version__

# Windows delivers no signal to an event loop (anyio.open_signal_receiver is POSIX-only; there is no SIGHUP): Ctrl-C
# arrives as KeyboardInterrupt, which unwinds the command and is told like a SIGINT (main), and a host's stop is
# TerminateProcess, which no process can catch; the children's job object ends them then (children/stdio.py).
SIGNALS: tuple[signal.Signals, ...] = () if sys.platform == "win32" else (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
Command = Callable[..., Awaitable[int]]  # a command's coroutine function: (args, settings, servers) -> exit code


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


# Where a new user looks first for how to choose the model.
MODEL_HELP = (
    "The model: META_AGENT_MODEL=provider:model (openai:, anthropic:, gemini:, ollama:) with the provider's API key"
    " in its usual variable (OPENAI_API_KEY, ...); no key needed for a server on this machine:"
    " OPENAI_BASE_URL=http://127.0.0.1:8080/v1 META_AGENT_MODEL=openai:NAME (llama.cpp's llama-server, or any"
    " OpenAI-compatible one), or ollama:NAME. Unset, a key's provider or a local Ollama is used."
    " `meta-agent check` says what is ready."
)


def _said(text: str) -> str:
    """A task with a word in it: an empty one would spend a model turn on nothing."""
    if not text.strip():
        raise argparse.ArgumentTypeError("the task is empty: say what to do")
    return text


def _add_runs(runs: argparse.ArgumentParser) -> None:
    """The arguments of `meta-agent runs`."""
    runs.add_argument("show", nargs="?", choices=["show"], help="show one run step by step")
    runs.add_argument("run_id", nargs="?", metavar="RUN_ID")
    whose = runs.add_mutually_exclusive_group()
    whose.add_argument(
        "--owner",
        metavar="SUBJECT",
        help="with a shared database: the runs of this subject: as stored (`sub:…`, `http:…`), or a signed-in user as "
        "the identity provider names them (`ISSUER#SUB`, or SUB of META_AGENT_AUTH_ISSUER; `token`: the static token's "
        "holder); default: local, the runs made off HTTP",
    )
    whose.add_argument(
        "--all", action="store_true", help="with a shared database: every subject's runs, each with its owner"
    )


def _add_serve(serve: argparse.ArgumentParser) -> None:
    """The description and arguments of `meta-agent serve`."""
    serve.description = (
        "Serve meta-agent as an MCP server: its tools ask, plan, agent and image_gen run the model over the tools of"
        " the child servers in servers.json. A host (Claude Desktop, Cursor, VS Code) starts it on stdio; over HTTP"
        " it listens at http://HOST:PORT/mcp, with /health for probes. Without a model set, each call uses the"
        " host's own model where the host offers MCP sampling."
    )
    serve.epilog = MODEL_HELP
    serve.add_argument(
        "--transport",
        choices=["stdio", "http"],
        default="stdio",
        help="stdio: a host starts this process and speaks MCP on its stdin and stdout (default); http: streamable"
        " HTTP at /mcp on --host and --port, for hosts that connect to a URL",
    )
    serve.add_argument("--host", default="127.0.0.1", help="HTTP: address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765, help="HTTP: port (default 8765)")
    serve.add_argument(
        "--allowed-host", action="append", default=[], metavar="HOST", help="HTTP: another Host header to accept"
    )


def _add_run(run: argparse.ArgumentParser) -> None:
    """The arguments of `meta-agent run`."""
    run.add_argument("task", type=_said, help="what to do, in words (quote it)")
    run.add_argument(
        "--mode", choices=["ask", "plan", "agent"], default="agent", help="one model turn, a plan, or the tool loop"
    )
    # One value per option, given again for more: `nargs="+"` would take the task after it as a pattern.
    run.add_argument(
        "--tools", action="append", metavar="PATTERN", help="offer only the tools this glob matches (repeatable)"
    )
    run.add_argument("--max-steps", type=_positive, metavar="N", help="model turns at most")
    run.add_argument(
        "--code",
        action=argparse.BooleanOptionalAction,
        help="code mode: the model writes a program over the tools (run_code); default: $META_AGENT_CODE_MODE",
    )
    run.add_argument(
        "--allow",
        action="append",
        metavar="PATTERN",
        help="run the tools this glob matches (fs.write_file, fs.*) without asking; never a `never` (repeatable)",
    )
    run.add_argument("--json", action="store_true", help="print the structured result as JSON")


def _parser() -> argparse.ArgumentParser:
    """The command line (README, Commands). Longer than ~60 lines on purpose: one declarative table of the commands
    and their options reads better whole than cut into pieces (serve's, run's and runs' have their own)."""
    common = _Parser(add_help=False)
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
    parser = _Parser(
        prog="meta-agent", description="An MCP server that is itself an agent.", epilog=MODEL_HELP, parents=[common]
    )
    parser.add_argument("--version", action="version", version=f"meta-agent {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    _add_serve(commands.add_parser("serve", parents=[common], help="serve MCP on stdio (default) or streamable HTTP"))
    _add_run(
        commands.add_parser(
            "run", parents=[common], help="run one task in-process; the answer goes to stdout", epilog=MODEL_HELP
        )
    )
    trust = commands.add_parser(
        "trust", parents=[common], help="record a trust level for tools (kept beside the config); list what is recorded"
    )
    trust.add_argument(
        "pattern", nargs="?", metavar="TOOL", help="a namespaced tool name or glob (pg.execute_sql, pg.*)"
    )
    trust.add_argument(
        "level",
        nargs="?",
        choices=[*TRUST_LEVELS, "forget"],
        help="never, ask, always, or forget (`'*' forget` also sets aside a trust file that cannot be read)",
    )

    tools = commands.add_parser("tools", parents=[common], help="the toolbox: each child's tools, status and trust")
    tools.add_argument("--json", action="store_true", help="print the toolbox as JSON")
    _add_runs(
        commands.add_parser(
            "runs",
            parents=[common],
            help="recent runs from their traces; `runs show ID` tells one",
            description="Recent runs, read from the trace directory: META_AGENT_TRACE_DIR, else this user's"
            " (shared by every checkout and every meta-agent this user runs); with META_AGENT_DATABASE_URL, the run"
            " index of that database. Set either to read another history.",
        )
    )
    check = commands.add_parser(
        "check",
        parents=[common],
        help="check the model and servers.json, start every child and report; exit 1 if a run could not start",
        description="Check the model settings (the provider known, its key set, a server on this machine or its"
        " network answering) and servers.json, start every child and report each; exit 1 when no model could serve"
        " a run or a child failed.",
        epilog=MODEL_HELP,
    )
    install = _add_host_commands(commands, common)
    for sub in (tools, check, trust, install):
        sub.add_argument(
            "--start-timeout",
            type=_seconds,
            default=DEFAULT_START_TIMEOUT,
            metavar="SECONDS",
            help=f"how long a child may take to start (default {DEFAULT_START_TIMEOUT:g})",
        )
    return parser


def _entry_name(text: str) -> str:
    if not SERVER_NAME.fullmatch(text) or len(text) > 64:
        raise argparse.ArgumentTypeError(f"{text!r}: use up to 64 of A-Z a-z 0-9 _ -")
    return text


def _add_host_commands(commands: Any, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`install`, `uninstall` and `bundle` (docs/hosts.md); returns `install`'s parser."""
    from meta_agent.hosts import DEFAULT_NAME, HOSTS  # what hosts there are: a few small modules, no SDK

    install: argparse.ArgumentParser = commands.add_parser(
        "install", parents=[common], help="put meta-agent into a host's config file and check that it starts"
    )
    uninstall = commands.add_parser("uninstall", parents=[common], help="take meta-agent out of a host's config file")
    for sub in (install, uninstall):
        sub.add_argument("host", choices=list(HOSTS), metavar="HOST", help=", ".join(HOSTS))
        sub.add_argument("--name", type=_entry_name, default=DEFAULT_NAME, help=f"the entry's name ({DEFAULT_NAME})")
        where = sub.add_mutually_exclusive_group()
        where.add_argument("--project", type=Path, metavar="DIR", help="the host's file of this project")
        where.add_argument("--file", type=Path, metavar="PATH", help="this file, not the host's own")
        sub.add_argument("--force", action="store_true", help="replace or remove an entry of that name not ours")
    install.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="in the entry's env (KEY alone: its value here)"
    )
    install.add_argument(
        "--env-from-shell", action="store_true", help="the variables meta-agent reads that are set here, into env"
    )
    install.add_argument("--no-check", action="store_true", help="write the entry without starting it")
    bundle = commands.add_parser("bundle", parents=[common], help="build meta-agent.mcpb, a bundle for Claude Desktop")
    bundle.add_argument("--output", type=Path, default=Path("meta-agent.mcpb"), metavar="PATH", help="where it goes")
    bundle.add_argument("--python", metavar="PATH", help="the Python that runs it (default: this installation's)")
    return install


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (the console script exits with it)."""
    if sys.stderr is None:  # started with fd 2 closed: what we would say goes nowhere (print would send it to stdout)
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115  (open for the process's life)
    args = _parser().parse_args(argv)
    args.config = getattr(args, "config", None)
    if args.command == "runs":
        from meta_agent.cli.runs import show_runs

        return _quietly_on_a_closed_pipe(show_runs, args)
    if args.command in ("install", "uninstall", "bundle"):  # the host's file, not the engine: none of what follows
        from meta_agent.cli import install

        return _quietly_on_a_closed_pipe(install.run, args)
    if args.command == "trust" and args.pattern is not None and args.level is None:
        return fail("trust: give a level after the tool: never, ask, always or forget", EXIT_USAGE)
    try:
        settings = load_settings()
        for line in unknown_settings(os.environ):
            note(line)
        args.config = args.config or settings.config
        servers, args.config_problem = _servers(args.config, serving=args.command == "serve")
        from meta_agent.internal import INTERNAL_TOOLS

        # an unknown name is bad input: say so before starting
        settings.enabled_internal_tools([tool.name for tool in INTERNAL_TOOLS])
        args.trust_file = trust_path(args.config)
        # likewise a broken trust file; `tools` shows what it does to the levels, and `trust … forget` repairs it
        if args.command != "tools" and not (args.command == "trust" and args.level == "forget"):
            trustfile.load(args.trust_file)
        if settings.database_url and args.command in ("serve", "run"):  # and a shared database it cannot use
            from meta_agent.store.database import check

            check(settings.database_url)
        if args.command in ("serve", "run"):  # and model settings that cannot work, before any child starts
            _check_model(settings.model, serving=args.command == "serve")
    except (ConfigError, ModelNotConfigured) as exc:
        return fail(str(exc), EXIT_USAGE)
    default_level = "info" if args.command == "serve" else "warning"
    configure_logging(getattr(args, "log_level", None) or settings.log_level or default_level)
    try:
        command, stops = _command(args)
        return _quietly_on_a_closed_pipe(anyio.run, _until_signalled, stops, command, args, settings, servers)
    except KeyboardInterrupt:  # on Windows; elsewhere only a Ctrl-C before the signal receiver was in place
        note("stopped by SIGINT")
        return EXIT_SIGNALLED + signal.SIGINT


def _servers(path: Path, *, serving: bool) -> tuple[Servers, str | None]:
    """servers.json, and why it cannot be used where `serve` goes on without it: a host that starts us would see only
    a bare disconnect, so `serve` serves with no child servers and says the one line to the host (in `initialize`'s
    instructions, each run's answer, /health) until the file is fixed, which it follows.

    Raises:
        ConfigError: the file cannot be used, for any other command.
    """
    try:
        return load_servers(path, os.environ), None
    except ConfigError as exc:
        if not serving:
            raise
        return Servers(), str(exc)


def _check_model(model: str | None, *, serving: bool) -> None:
    """Say now, before any child starts, what makes every run fail for want of a model: a malformed META_AGENT_MODEL,
    a missing API key, `sampling` for `run`; and for `run`, no model set where none can be found (serve's host may
    lend its own through sampling, so a serve without one is asked at each call).

    Raises:
        ModelNotConfigured: saying what to set.
    """
    from meta_agent.providers.model_setting import check_model_setting, default_model

    check_model_setting(model, os.environ, can_sample=serving)
    if not serving and not (model or "").strip():
        anyio.run(default_model, os.environ)  # the run would look the same way: a key set, or Ollama answering


def entry() -> NoReturn:
    """The `meta-agent` console script and `python -m meta_agent`: `main`, then `exit_now` with its code. A reader of
    stdout or stderr that goes away costs only what it would have read (terminal.guard_standard_streams)."""
    guard_standard_streams()
    exit_now(main())


def exit_now(code: int) -> NoReturn:
    """Exit with `code` once the command is done, without the interpreter's teardown: collecting and freeing every
    object of 1,400 modules took a fifth of a second after the answer of a one-shot `meta-agent run`
    (benchmarks/RESULTS.md, One-shot). What exit would still do is done first: the `atexit` callbacks (logging's
    last flush, an OpenTelemetry exporter's last batch), then the standard streams are flushed. Every child has
    been ended and every file closed by then (the command's own `async with`). No thread is waited for: the threads
    left are daemons (the trace writer, whose files are closed, and idle worker threads)."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:  # None: the process started with that descriptor closed
            with suppress(OSError, ValueError):  # a reader that went away; a stream closed already
                stream.flush()
    os._exit(code)


def _command(args: argparse.Namespace) -> tuple[Command, tuple[signal.Signals, ...]]:
    """The command to run, imported now (each brings the MCP SDK, `serve` its server), and the signals that stop it."""
    if args.command == "serve":
        from meta_agent.cli import serving

        command = serving.serve_on_http if args.transport == "http" else serving.serve_on_stdio
        return command, serving.keep_reload_signal(SIGNALS)
    with hidden(*WITHOUT_HTTP_SERVER):  # none of these serves HTTP (meta_agent.shared.unimported)
        from meta_agent.cli import commands

    named = {
        "run": commands.run_task,
        "tools": commands.list_tools,
        "check": commands.check_servers,
        "trust": commands.record_trust,
    }
    return named[args.command], SIGNALS


def _quietly_on_a_closed_pipe(function: Callable[..., int], *args: Any) -> int:
    try:
        return function(*args)
    except BrokenPipeError:
        # The reader went away (`meta-agent tools | head`): nothing more to say, and no traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED


async def _until_signalled(stops: tuple[signal.Signals, ...], command: Command, *args: Any) -> int:
    """Run `command`; the first signal of `stops` cancels it. Signals stay caught until the command has finished
    unwinding, so a second one cannot interrupt the stopping of the children; it says which are left."""
    received: list[int] = []
    result, broken_pipe = 0, False
    with _signal_receiver(stops) as signals:
        async with anyio.create_task_group() as tg:
            with anyio.CancelScope() as work:

                async def watch() -> None:
                    async for signum in signals:
                        if not received:
                            received.append(signum)
                            from meta_agent.store.run_index import process_stopping

                            process_stopping()  # its runs are interrupted, not cancelled by their callers
                            work.cancel()
                        else:
                            note(_still_stopping())

                tg.start_soon(watch)
                try:
                    result = await command(*args)
                except* BrokenPipeError:  # the reader of our stdout went away, possibly inside a task group
                    broken_pipe = True
            tg.cancel_scope.cancel()
    if broken_pipe:
        raise BrokenPipeError
    if received:
        note(f"stopped by {signal.Signals(received[0]).name}")
        return EXIT_SIGNALLED + received[0]
    return result


@contextmanager
def _signal_receiver(stops: tuple[signal.Signals, ...]) -> Iterator[AsyncIterator[int]]:
    """The signals of `stops` as they come; where there are none to catch (Windows), a stream that ends at once.

    A handler replaces a disposition of SIG_IGN, but not a blocked signal: a parent may have started us with SIGNALS
    blocked (the mask passes across exec), and then a stop would wait forever, and the children, who inherit the
    mask, would be deaf to their SIGTERM. So they are unblocked, once they are caught: one that came while they were
    blocked is then received like any other."""
    if not stops:
        yield _no_signals()
        return
    with anyio.open_signal_receiver(*stops) as signals:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
        yield signals


async def _no_signals() -> AsyncIterator[int]:
    return
    yield  # an async generator that yields nothing


def _still_stopping() -> str:
    """What a second signal is told: the children whose processes are still being stopped."""
    from meta_agent.children.stdio import running_children  # loaded by then if any child was started

    left = running_children()
    if left:
        return f"still stopping {plural(len(left), 'child server')}: {', '.join(left)}"
    return "still stopping; no child server process is left"
