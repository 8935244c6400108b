"""Why a child failed, in one line: what the `children` status shows and what a failed call tells the model.

A failure reaches the supervisor as an exception from the SDK, a transport or the OS, often wrapped in the exception
groups of the task groups it crossed. `describe_failure` names it in the child's terms (the command not found, the
HTTP status, the server exiting during start-up) and adds what the child itself left behind (`Clues`): the
non-protocol output it wrote to stdout, or its last stderr lines.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field

import anyio
import httpx2
import mcp.types as t
import pydantic
from mcp.shared.exceptions import MCPError

from meta_agent.config import ServerEntry
from meta_agent.text import one_line

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
    bad_output: str | None = None  # the last line it wrote to stdout that was not JSON-RPC, described
    http_status: int | None = None  # the last HTTP error status it answered with

    def explain_start(self, text: str) -> str:
        """`text` (why the start failed), with what the child said last: its bad stdout, else its stderr."""
        if self.bad_output:
            return f"{text}; it wrote non-protocol output to stdout ({self.bad_output})"
        if self.stderr:
            telling = [line for line in self.stderr if _TELLING.search(line)]
            return f"{text}; its stderr ended with: {quoted((telling or list(self.stderr))[-1])}"
        return text


def describe_failure(exc: BaseException, entry: ServerEntry, *, ready: bool, clues: Clues) -> str:
    """Why a connection to the child of `entry` ended (`ready`: it had come up) or never came up, in one line."""
    leaf = _leaf(exc)
    if isinstance(leaf, StartFailure):
        return str(leaf)
    if isinstance(leaf, FileNotFoundError) and entry.command is not None and not ready:
        return f"command not found: {entry.command}"
    if isinstance(leaf, PermissionError) and entry.command is not None and not ready:
        return f"cannot run {entry.command}: permission denied"
    if isinstance(leaf, MCPError) and leaf.code == t.CONNECTION_CLOSED:
        text = "the server exited" if entry.command else "the connection closed"
        return text if ready else clues.explain_start(f"{text} during start-up")
    if clues.http_status is not None:
        hint = " (check its headers)" if clues.http_status in (401, 403) else ""
        return f"HTTP {clues.http_status} from {entry.url}{hint}"
    if isinstance(leaf, httpx2.TransportError):
        return f"cannot reach {entry.url}: {describe_exception(leaf)}"
    text = describe_exception(leaf)
    return text if ready else clues.explain_start(text)


def describe_exception(exc: BaseException) -> str:
    """`exc` (or the exception inside its groups) in one line: its gist, and its type where that says something."""
    leaf = _leaf(exc)
    if isinstance(leaf, MCPError):
        return f"{_gist(leaf.message)} (JSON-RPC error {leaf.code})"
    if isinstance(leaf, pydantic.ValidationError):
        return f"malformed message: {first_error(leaf)}"
    if isinstance(leaf, TimeoutError):
        return "timed out"
    text = _gist(str(leaf))
    return f"{type(leaf).__name__}: {text}" if text else type(leaf).__name__


def first_error(exc: pydantic.ValidationError) -> str:
    """The first of the validation errors in `exc`, with where it is."""
    error = exc.errors()[0]
    where = ".".join(str(p) for p in error["loc"])
    return quoted(f"{where}: {error['msg']}" if where else str(error["msg"]))


def quoted(text: str, limit: int = QUOTED_MAX) -> str:
    """What a child said, fit to quote: without terminal codes, other control characters as spaces, on one line."""
    return one_line(_CONTROL.sub(" ", _TERMINAL_CODE.sub("", text)), limit)


def _gist(message: str) -> str:
    """The first non-empty line of an error message: messages put their gist there and the detail (a schema, a
    traceback) after it."""
    return next(filter(None, map(quoted, message.splitlines())), "")


def _leaf(exc: BaseException) -> BaseException:
    """The first non-group exception inside (possibly nested) exception groups, a cancellation only if alone."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = next((e for e in exc.exceptions if not isinstance(e, anyio.get_cancelled_exc_class())), exc.exceptions[0])
    return exc
