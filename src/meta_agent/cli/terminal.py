"""What the command line prints: one-line failures and notes, the toolbox, check lines, and the live view of
`meta-agent run`; and the exit codes it ends with (cli/main.py says which is which).

Colour only on a terminal (and never with NO_COLOR set); plain text when piped.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TextIO

from meta_agent.core import events as ev
from meta_agent.core.event_lines import describe
from meta_agent.core.result import RunResult
from meta_agent.text import plural

if TYPE_CHECKING:  # types only: the main module imports this one, and must not load the MCP SDK for `--help`
    from meta_agent.children.supervisor import ChildPool, ChildStatus
    from meta_agent.core.tools import ToolSpec
    from meta_agent.toolbox import Toolbox

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_SIGNALLED = 128  # plus the signal number

Paint = Callable[[str, str], str]
_COLOURS = {"green": "32", "red": "31", "yellow": "33", "dim": "2", "bold": "1"}


def paint_for(out: TextIO) -> Paint:
    """ANSI colour on a terminal (unless NO_COLOR is set), plain text otherwise."""
    if out.isatty() and not os.environ.get("NO_COLOR"):
        return lambda text, colour: f"\033[{_COLOURS[colour]}m{text}\033[0m"
    return lambda text, _colour: text


def note(message: str) -> None:
    """A line for the user on stderr, named as ours."""
    print(f"meta-agent: {message}", file=sys.stderr)


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


def print_toolbox(toolbox: Toolbox, pool: ChildPool, out: TextIO, withheld: Mapping[str, str] | None = None) -> None:
    """Internal tools first (then those `withheld`, with why), then each child with its status and tools, then any
    problems."""
    paint = paint_for(out)
    internal = [spec for spec in toolbox.tools if spec.internal]
    print(f"{paint('internal', 'bold')} · {plural(len(internal), 'tool')}", file=out)
    _print_tools(internal, out)
    for name, why in (withheld or {}).items():
        print(f"  {name}  {paint('withheld', 'yellow')}: {why}", file=out)
    for child in pool:
        print(f"{paint(child.name, 'bold')} · {check_line(child.status, paint)}", file=out)
        _print_tools([spec for spec in toolbox.tools if spec.server == child.name], out)
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


class LiveView:
    """The event sink of `meta-agent run`: one line per event on `out`; on a terminal, heartbeats overwrite
    each other in place instead of piling up. Keeps the last result it saw (also a cancelled or failed run's)."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._tty = out.isatty()
        self._paint = paint_for(out)
        self._beating = False
        self.result: RunResult | None = None

    async def __call__(self, event: ev.Event) -> None:
        if isinstance(event, ev.RunFinished | ev.RunFailed) and event.result is not None:
            self.result = event.result
        line = describe(event)
        if line is None:
            return
        colour = {"tool_call_finished": "dim", "heartbeat": "yellow", "run_failed": "red", "limit_reached": "yellow"}
        if isinstance(event, ev.ToolCallFinished) and not event.ok:
            colour = {**colour, "tool_call_finished": "red"}
        text = self._paint(line, colour[event.kind]) if event.kind in colour else line
        if self._tty and isinstance(event, ev.Heartbeat):
            self._out.write(f"\r\033[K{text}")
            self._beating = True
        else:
            self._out.write(f"{chr(13) + chr(27) + '[K' if self._beating else ''}{text}\n")
            self._beating = False
        self._out.flush()
