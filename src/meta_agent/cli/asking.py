"""Approval for `meta-agent run` (README, Trust and approval): the tools `--allow` matches run without asking; on a
terminal the person is asked about each other `ask`-level call, y/n/t, one question at a time; elsewhere nobody is
asked.

The answer is read without blocking the event loop, so a Ctrl-C (cli/main.py cancels the command) ends the wait at
once. On POSIX the loop waits until stdin is readable; Windows has no such wait for a console, so a worker thread
reads the line there and is abandoned on cancel (the process is ending then anyway).
"""

from __future__ import annotations

import fnmatch
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import anyio.to_thread

from meta_agent.cli.terminal import LiveView, paint_for
from meta_agent.core.event_lines import arguments_line
from meta_agent.core.tool_call import Verdict
from meta_agent.core.tools import ToolSpec

ARGUMENTS_SHOWN = 400
PROMPT = "  Allow execution? (y)es / (n)o / (t)rust for session "
ALLOWED_ONCE = Verdict(True, "allowed once")
DENIED = Verdict(False, "denied")
TRUSTED = Verdict(True, "allowed for the rest of this run", for_run=True)
ANSWERS = {"y": ALLOWED_ONCE, "yes": ALLOWED_ONCE, "n": DENIED, "no": DENIED, "t": TRUSTED, "trust": TRUSTED}


def on_a_terminal() -> bool:
    """Whether a person can be asked: stdin to read the answer from and stderr to ask on are both a terminal."""
    return sys.stdin.isatty() and sys.stderr.isatty()


def approver_for(allow: Sequence[str], view: LiveView) -> RunApprover:
    """The run's approver: asking on a terminal, else allowing what `allow` matches and refusing the rest with the
    `--allow` that would allow each (a script or a pipe runs the command: the fix is one of its arguments)."""
    return RunApprover(allow, view if on_a_terminal() else None)


def unasked(name: str) -> str:
    """Why a call was refused off a terminal, and the argument that allows it: `--allow` with the tool's own name."""
    return (
        f"nobody to ask, not on a terminal; run again with `--allow {name}` to allow it,"
        f" or record `meta-agent trust {name} always`"
    )


class RunApprover:
    """Allows the tools the `--allow` globs match; asks about the others on `view` (one question at a time, even
    when a step's calls run in parallel), or, with no view, refuses them saying how to allow them."""

    def __init__(self, allow: Sequence[str], view: LiveView | None) -> None:
        self._allow = tuple(allow)
        self._view = view
        self._trusted: set[str] = set()  # the tools answered `t`
        self._one_at_a_time = anyio.Lock()

    def remembered(self, spec: ToolSpec) -> str | None:
        return "for the rest of this run" if spec.name in self._trusted else None

    async def ask(self, spec: ToolSpec, arguments: Mapping[str, Any]) -> Verdict:
        allowing = next((pattern for pattern in self._allow if fnmatch.fnmatchcase(spec.name, pattern)), None)
        if allowing is not None:
            return Verdict(True, f"allowed by --allow {allowing}")
        if self._view is None:
            return Verdict(False, unasked(spec.name))
        async with self._one_at_a_time:
            if spec.name in self._trusted:  # a call of the same tool was answered `t` while this one waited
                return Verdict(True, "already allowed for the rest of this run")
            verdict = await self._question(self._view, spec, arguments)
        if verdict.for_run:
            self._trusted.add(spec.name)
        return verdict

    async def _question(self, view: LiveView, spec: ToolSpec, arguments: Mapping[str, Any]) -> Verdict:
        """Ask until the answer is y, n or t (or the input ends: a refusal); the event lines wait meanwhile."""
        with view.asking(spec.name) as out:
            paint = paint_for(out)
            shown = arguments_line(arguments, ARGUMENTS_SHOWN)
            out.write(f"{paint('?', 'yellow')} Tool '{spec.name}' wants to execute with arguments: {shown}\n")
            while True:
                out.write(PROMPT)
                out.flush()
                try:
                    line = await _read_line()
                except anyio.get_cancelled_exc_class():
                    out.write("\n")  # what follows (`stopped by SIGINT`) starts a line of its own
                    raise
                if line is None:
                    out.write("\n")
                    return Verdict(False, "no answer: the input ended")
                verdict = ANSWERS.get(line.strip().lower())
                if verdict is not None:
                    return verdict


async def _read_line() -> str | None:
    """One line the person typed (a terminal in its usual line mode hands over whole lines), or None at the end of
    input (Ctrl-D)."""
    if sys.platform == "win32":
        line: str = await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
        return line or None
    fd = sys.stdin.fileno()
    await anyio.wait_readable(fd)
    data = os.read(fd, 4096)
    return data.decode(errors="replace") if data else None
