"""Why a child failed, in one line: what the `children` status shows and what a failed call tells the model.

A failure reaches the supervisor as an exception from the SDK, a transport or the OS, often wrapped in the exception
groups of the task groups it crossed. `describe_failure` names it in the child's terms (the command not found, the
HTTP status, the server exiting during start-up; an HTTP child by its URL without the query or user info that may hold
its key) and adds what the child itself left behind (`Clues`): the
non-protocol output it wrote to stdout, or its last stderr lines; and, for a child that exited during a call, its exit
status and the last line it wrote to stderr meanwhile. `lasts` tells a failure that trying again cannot mend (a
command that does not exist or cannot be run) from one that may pass.
"""

from __future__ import annotations

import re
import signal
from collections import deque
from dataclasses import dataclass, field

import anyio
import httpx2
import mcp.types as t
import pydantic
from mcp.shared.exceptions import MCPError

from meta_agent.config.servers import ServerEntry
from meta_agent.errors import leaf, summary
from meta_agent.shared.text import first_line, one_line
from meta_agent.shared.urls import loggable_url
from meta_agent.shared.validation import refusal

# Stderr lines kept per child, to explain a failed start.
STDERR_TAIL = 20
# Characters of a child's own words (an error message, a stderr line) quoted in one of our messages.
QUOTED_MAX = 300

# Colour and cursor codes: a child that believes it writes to a terminal puts them in its log lines.
_TERMINAL_CODE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# A stderr line that looks like an error says more than a runtime's closing banner.
_TELLING = re.compile(r"error|exception|fatal|refus|denied|not found", re.I)


class StartFailure(Exception):
    """A child that cannot even be spawned, for a reason we can name before trying."""


@dataclass(kw_only=True)
class Clues:
    """What a child left behind during one connection that can explain why the connection failed."""

    stderr: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_TAIL))
    stderr_lines: int = 0  # how many lines it wrote to stderr in all (a call notes where it began)
    bad_output: str | None = None  # the last line it wrote to stdout that was not JSON-RPC, described
    http_status: int | None = None  # the last HTTP error status it answered with
    exit_status: int | None = None  # a stdio child's, once it exited on its own (not ended by us)
    exited: anyio.Event = field(default_factory=anyio.Event)  # set with `exit_status`
    stderr_closed: anyio.Event = field(default_factory=anyio.Event)  # every writer of its stderr is gone

    def note_stderr(self, line: str) -> None:
        self.stderr.append(line)
        self.stderr_lines += 1

    def note_exit(self, status: int) -> None:
        self.exit_status = status
        self.exited.set()

    async def settled(self, within: float) -> None:
        """Wait, `within` seconds at most, until the exit status is known and the child's stderr has been read to its
        end (its last line comes in after its exit, or a grandchild may hold the pipe a while longer)."""
        with anyio.move_on_after(within):
            await self.exited.wait()
            await self.stderr_closed.wait()

    def explain_exit(self, text: str, since: int) -> str:
        """`text` (the child exited), with its exit status and the last line it wrote to stderr after its first
        `since` lines, where known: `the server exited during crash (exit status 7; its stderr ended with: ...)`."""
        known = [] if self.exit_status is None else [exit_status(self.exit_status)]
        if self.stderr_lines > since and self.stderr:
            known.append(f"its stderr ended with: {quoted(self.stderr[-1])}")
        return f"{text} ({'; '.join(known)})" if known else text

    def explain_start(self, text: str) -> str:
        """`text` (why the start failed), with what the child said last: its bad stdout, else its stderr."""
        if self.bad_output:
            return f"{text}; it wrote non-protocol output to stdout ({self.bad_output})"
        if self.stderr:
            telling = [line for line in self.stderr if _TELLING.search(line)]
            return f"{text}; its stderr ended with: {quoted((telling or list(self.stderr))[-1])}"
        return text


def exit_status(code: int) -> str:
    """A process's return code as a person reads it: `exit status 1`, or `killed by SIGKILL` (a negative code)."""
    if code >= 0:
        return f"exit status {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


def lasts(exc: BaseException, entry: ServerEntry, *, ready: bool) -> bool:
    """Whether the failure `exc` of the child of `entry` cannot pass by trying again: its command does not exist or
    cannot be run, or its cwd is no directory. Such a child is failed until servers.json changes or is reloaded."""
    inner = leaf(exc)
    if isinstance(inner, StartFailure):
        return True
    return entry.command is not None and not ready and isinstance(inner, FileNotFoundError | PermissionError)


def describe_failure(exc: BaseException, entry: ServerEntry, *, ready: bool, clues: Clues) -> str:
    """Why a connection to the child of `entry` ended (`ready`: it had come up) or never came up, in one line."""
    inner = leaf(exc)
    if isinstance(inner, StartFailure):
        return str(inner)
    if isinstance(inner, FileNotFoundError) and entry.command is not None and not ready:
        return f"command not found: {entry.command}"
    if isinstance(inner, PermissionError) and entry.command is not None and not ready:
        return f"cannot run {entry.command}: permission denied"
    if isinstance(inner, MCPError) and inner.code == t.CONNECTION_CLOSED:
        text = "the server exited" if entry.command else "the connection closed"
        return text if ready else clues.explain_start(f"{text} during start-up")
    if clues.http_status is not None:
        hint = " (check its headers)" if clues.http_status in (401, 403) else ""
        return f"HTTP {clues.http_status} from {loggable_url(str(entry.url))}{hint}"
    if isinstance(inner, httpx2.TransportError):
        return f"cannot reach {loggable_url(str(entry.url))}: {describe_exception(inner)}"
    text = describe_exception(inner)
    return text if ready else clues.explain_start(text)


def describe_exception(exc: BaseException) -> str:
    """`exc` (or the exception inside its groups) in one line: its gist, and its type where that says something."""
    inner = leaf(exc)
    if isinstance(inner, MCPError):
        return f"{quoted(first_line(inner.message))} (JSON-RPC error {inner.code})"
    if isinstance(inner, pydantic.ValidationError):
        return f"malformed message: {first_error(inner)}"
    if isinstance(inner, TimeoutError):
        return "timed out"
    return quoted(summary(inner))


def first_error(exc: pydantic.ValidationError) -> str:
    """What was wrong with a message or result the child sent, where it is and how many more problems it had."""
    return quoted(refusal(exc))


def quoted(text: str, limit: int = QUOTED_MAX) -> str:
    """What a child said, fit to quote: without terminal codes, other control characters as spaces, on one line."""
    return one_line(_CONTROL.sub(" ", _TERMINAL_CODE.sub("", text)), limit)
