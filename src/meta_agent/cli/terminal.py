"""What the command line prints: one-line failures and notes, the toolbox, check lines, and the live view of
`meta-agent run`; and the exit codes it ends with (cli/main.py says which is which).

Colour only on a terminal (and never with NO_COLOR set); plain text when piped.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any, TextIO, cast

from meta_agent.core import events as ev
from meta_agent.core.event_lines import describe
from meta_agent.core.result import RunResult
from meta_agent.shared.text import one_line, plural

if TYPE_CHECKING:  # types only: the main module imports this one, and must not load the MCP SDK for `--help`
    from meta_agent.children.pool import ChildPool
    from meta_agent.children.supervisor import ChildStatus
    from meta_agent.config.servers import WebhookEntry
    from meta_agent.core.tools import ToolSpec
    from meta_agent.providers.model_check import ModelVerdict
    from meta_agent.toolbox.build import Toolbox

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_SIGNALLED = 128  # plus the signal number

Paint = Callable[[str, str], str]
_COLOURS = {"green": "32", "red": "31", "yellow": "33", "dim": "2", "bold": "1"}


# What a write raises once its reader has gone: a pipe's (EPIPE, as Python ignores SIGPIPE) or a socket's.
_READER_GONE = (BrokenPipeError, ConnectionResetError)


class _Guarded:
    """A standard stream whose reader may go away (`meta-agent run 2>&1 | head -2`, a host that closes our stderr).
    The first write or flush that finds it gone points its descriptor at /dev/null and drops what follows: a progress
    line, a log line or the answer is not worth failing the work that writes it (a tool call, the run, its trace),
    and the interpreter has nothing left to flush at exit ("Exception ignored ... BrokenPipeError")."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return self._stream.write(text)
            except _READER_GONE:
                self._let_go()
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._stream.flush()
            except _READER_GONE:
                self._let_go()

    def _let_go(self) -> None:
        self.gone = True
        with suppress(OSError, ValueError):  # a stream with no descriptor (io.UnsupportedOperation), or closed
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, self._stream.fileno())
            finally:
                os.close(null)
        with suppress(OSError, ValueError):  # what its buffer still holds goes to /dev/null now
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def guard_standard_streams() -> None:
    """From now on a write to stdout or stderr whose reader has gone is dropped quietly, and so is every later one to
    that stream (see _Guarded). For the process's own streams: the console script calls it first."""
    if sys.stdout is not None and not isinstance(sys.stdout, _Guarded):
        sys.stdout = cast(TextIO, _Guarded(sys.stdout))
    if sys.stderr is not None and not isinstance(sys.stderr, _Guarded):
        sys.stderr = cast(TextIO, _Guarded(sys.stderr))


def paint_for(out: TextIO) -> Paint:
    """ANSI colour on a terminal (unless NO_COLOR is set), plain text otherwise."""
    if out.isatty() and not os.environ.get("NO_COLOR"):
        return lambda text, colour: f"\033[{_COLOURS[colour]}m{text}\033[0m"
    return lambda text, _colour: text


def note(message: str) -> None:
    """A line for the user on stderr, named as ours, in one write (print's two, the text and then the newline, let a
    log line of another thread, or of a child sharing the stream, land in the middle)."""
    sys.stderr.write(f"meta-agent: {message}\n")


def fail(message: str, code: int) -> int:
    """Say why the command fails, in one line; returns `code` to exit with."""
    note(message)
    return code


def check_line(status: ChildStatus, paint: Paint) -> str:
    """A child's status in one line: ready with its details, disabled, or failed with the reason."""
    if status.state == "ready":
        seconds = f"{status.start_seconds:.2f} s" if status.start_seconds is not None else ""
        server = " ".join(filter(None, (status.server_name, status.server_version)))
        details = (status.transport, status.protocol_version, plural(status.tool_count, "tool"), seconds, server)
        return "  ".join(filter(None, (paint("ready ", "green"), *details)))
    if status.state == "disabled":
        return paint("disabled", "dim")
    return f"{paint(status.state, 'red')}  {status.error}"


def print_models(setting: str | None, models: Sequence[ModelVerdict], out: TextIO) -> None:
    """`check`'s model lines: the setting, then each model of it with its state and why."""
    paint = paint_for(out)
    setting = one_line(setting or "", 200)
    print(f"META_AGENT_MODEL={setting}" if setting else "META_AGENT_MODEL is not set", file=out)
    width = max(len(model.model) for model in models)
    colours = {"ready": "green", "failed": "red", "host": "yellow"}
    for model in models:
        state = paint(model.state.ljust(6), colours[model.state])
        print(f"  {model.model.ljust(width)}  {state}  {model.detail}", file=out, flush=True)


def webhook_line(entry: WebhookEntry, paint: Paint) -> str:
    """A webhook's entry in one line: its method, where it goes (the origin only: a path may be its secret), its
    timeout and trust; or disabled."""
    if entry.disabled:
        return paint("disabled", "dim")
    trust = f"trust {entry.trust}" if entry.trust else "trust ask (default)"
    return "  ".join((paint("valid", "green"), entry.method, entry.origin, f"timeout {entry.timeout:g} s", trust))


def print_toolbox(
    toolbox: Toolbox, pool: ChildPool, out: TextIO, withheld: Sequence[tuple[ToolSpec, str]] = ()
) -> None:
    """Internal tools first, then each child with its status and tools, then the webhooks, each group followed by its
    tools that are `withheld` (with why), then any problems."""
    paint = paint_for(out)
    internal = [spec for spec in toolbox.tools if spec.internal]
    print(f"{paint('internal', 'bold')} · {plural(len(internal), 'tool')}", file=out)
    _print_tools(internal, out)
    _print_withheld([(spec, why) for spec, why in withheld if spec.server is None], out, paint)
    for child in pool:
        print(f"{paint(child.name, 'bold')} · {check_line(child.status, paint)}", file=out)
        _print_tools([spec for spec in toolbox.tools if spec.server == child.name], out)
        _print_withheld([(spec, why) for spec, why in withheld if spec.server == child.name], out, paint)
    webhooks = pool.webhooks
    if webhooks.entries:
        print(f"{paint(webhooks.name, 'bold')} · {plural(len(webhooks.entries), 'webhook')}", file=out)
        _print_tools([spec for spec in toolbox.tools if spec.server == webhooks.name], out)
        _print_withheld([(spec, why) for spec, why in withheld if spec.server == webhooks.name], out, paint)
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


def _print_withheld(withheld: list[tuple[ToolSpec, str]], out: TextIO, paint: Paint) -> None:
    for spec, why in withheld:
        print(f"  {spec.name}  {paint('withheld', 'yellow')}: {why}", file=out)


class LiveView:
    """The event sink of `meta-agent run`: one line per event on `out`; on a terminal, heartbeats overwrite
    each other in place instead of piling up. Keeps the last result it saw (also a cancelled or failed run's).

    A question to the person at the terminal (cli/asking.py) is written in the view's place (`asking`): while it is
    open, and until its answer's line, the other event lines wait, then follow; heartbeats are dropped meanwhile.
    `approval_requested` is never a line: the question stands there, or the answer's line says why nobody was asked.
    """

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._tty = out.isatty()
        self._paint = paint_for(out)
        self._beating = False
        self._held: list[str] | None = None  # the lines that wait for a question and its answer's line
        self._answering: str | None = None  # the tool whose answer's line ends the wait, once the question is done
        self.result: RunResult | None = None

    async def __call__(self, event: ev.Event) -> None:
        if isinstance(event, ev.RunFinished | ev.RunFailed):
            self.result = event.result or self.result
            self._release()  # nothing is asked after the end
        if isinstance(event, ev.RunStarted) and event.unavailable_servers:
            self._started_short(event)
            return
        line = describe(event)
        if line is None or isinstance(event, ev.ApprovalRequested):
            return
        colour = {"tool_call_finished": "dim", "heartbeat": "yellow", "run_failed": "red", "limit_reached": "yellow"}
        if isinstance(event, ev.ToolCallFinished) and not event.ok:
            colour = {**colour, "tool_call_finished": "red"}
        text = self._paint(line, colour[event.kind]) if event.kind in colour else line
        if self._held is None:
            self._show(text, isinstance(event, ev.Heartbeat))
        elif isinstance(event, ev.ApprovalAnswered) and event.name == self._answering:
            self._line(text)
            self._release()
        elif not isinstance(event, ev.Heartbeat):  # a beat would be stale by the time it could be shown
            self._held.append(text)

    def _started_short(self, event: ev.RunStarted) -> None:
        """The run's first line, then one line for each server it could have used that was not ready, with why."""
        self._line(describe(dataclasses.replace(event, unavailable_servers=())))
        for server in event.unavailable_servers:
            told = f"not ready · {server.server} ({server.status}): {server.reason} · its tools are not in this run"
            self._line(self._paint(told, "yellow"))

    @contextmanager
    def asking(self, name: str) -> Iterator[TextIO]:
        """Hold the view for a question about tool `name`: yields the stream to write it on. The event lines that
        come meanwhile follow the line of its answer (`approval_answered` of `name`), or come at once if the
        question is cancelled."""
        self._release()  # an earlier question's, should its answer's line never have come
        self._line(None)
        self._held = []
        try:
            yield self._out
        except BaseException:
            self._release()
            raise
        self._answering = name

    def _release(self) -> None:
        held, self._held, self._answering = self._held or [], None, None
        for text in held:
            self._line(text)

    def _show(self, text: str, heartbeat: bool) -> None:
        if self._tty and heartbeat:
            self._out.write(f"\r\033[K{text}")
            self._beating = True
            self._out.flush()
        else:
            self._line(text)

    def _line(self, text: str | None) -> None:
        """Write `text` as a line of its own, over a heartbeat shown in place (None: only clear the heartbeat)."""
        if self._beating:
            self._out.write("\r\033[K")
            self._beating = False
        if text is not None:
            self._out.write(f"{text}\n")
        self._out.flush()
