"""What a host writes to our stdin, line by line: each line a JSON-RPC message for the server, or one that is not,
answered at once in place of the server, as the HTTP front answers the same bytes.

The SDK hands a line that is not a valid message to the session as an exception, which drops it: its caller waited
forever. JSON-RPC 2.0 (section 5) says what each such line is owed:

- not UTF-8, not JSON, or nested too deeply to read: `-32700` with id null;
- JSON that is not a message: `-32600`, with the line's id where a usable one can be read (a string or an integer,
  as MCP allows), else id null (`42`, `[]`, `{}`, an id that is a list, an object, a boolean, a fraction or null);
- a request whose params are not an object: `-32602` (`-32601` for a method MCP does not know), with its id;
- a line over `LINE_LIMIT`: `-32600` with id null, never held whole.

A notification whose only fault is its params, or a malformed response (it has a result or an error and no method),
is never answered (JSON-RPC answers neither), only counted in the log. Lines of whitespace only are skipped. A host
sending nothing but bad lines gets one log line at once and then at most one a second, counting the others.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import mcp.types as t
import pydantic_core
import structlog
from mcp.types.methods import SPEC_CLIENT_METHODS, SPEC_CLIENT_NOTIFICATION_METHODS
from pydantic import ValidationError

from meta_agent.shared import bounded_lines

log = structlog.get_logger(__name__)

# The longest line read, in bytes: what one message may take in memory before it is parsed. The HTTP front takes
# bodies of up to 4 MiB; a stdio host is the user's own program, given room for large pasted inputs.
LINE_LIMIT = 16 * 2**20
# Log lines about bad lines: the first at once, then at most one in this many seconds, with the count in between.
LOG_EVERY = 1.0

KNOWN_METHODS = SPEC_CLIENT_METHODS | SPEC_CLIENT_NOTIFICATION_METHODS


@dataclass(frozen=True, kw_only=True)
class Refusal:
    """A line that is no message for the server: the answer it is owed (None: owed none) and why, for the log."""

    answer: t.JSONRPCError | None
    reason: str


async def lines_within(receive: Callable[[], Awaitable[bytes]], limit: int = LINE_LIMIT) -> AsyncIterator[bytes | None]:
    """Each line (with its newline) of what `receive` returns until it returns b"", the last perhaps without one;
    None in place of a line longer than `limit` bytes, whose bytes are dropped as they come (bounded_lines)."""
    async for line in bounded_lines.lines_within(receive, limit):
        yield line if isinstance(line, bytes) else None


def screened(line: bytes | None) -> t.JSONRPCMessage | Refusal | None:
    """The message `line` holds, or why it holds none; None for a line of whitespace (skipped). `line` None is a
    line over the limit."""
    if line is None:
        return _refused(None, t.INVALID_REQUEST, f"Invalid Request: the line is over {LINE_LIMIT // 2**20} MiB")
    if line.isspace():
        return None
    try:
        value = pydantic_core.from_json(line)  # the SDK's own parser: what it reads, this reads
    except ValueError:  # also not UTF-8, a number out of range, nesting deeper than the parser's limit
        return _refused(None, t.PARSE_ERROR, "Parse error: the line is not JSON")
    try:
        message = t.jsonrpc_message_adapter.validate_python(value, by_name=False)
    except ValidationError:
        return _invalid(value)
    if isinstance(message, t.JSONRPCNotification) and "id" in value:
        # A request whose id is no JSON-RPC id validates as a notification, which nobody answers.
        return _refused(None, t.INVALID_REQUEST, "Invalid Request: the id must be a string or an integer")
    return message


def _invalid(value: object) -> Refusal:
    """Why `value`, JSON that failed to validate as a JSON-RPC message, is none, and the answer it is owed."""
    if not isinstance(value, dict):
        return _refused(None, t.INVALID_REQUEST, "Invalid Request: a message is one JSON object")
    request_id = _usable_id(value)
    if "method" not in value and ("result" in value or "error" in value):
        return Refusal(answer=None, reason="malformed response")
    if "id" in value and request_id is None:
        return _refused(None, t.INVALID_REQUEST, "Invalid Request: the id must be a string or an integer")
    method = value.get("method")
    if value.get("jsonrpc") != "2.0":
        return _refused(request_id, t.INVALID_REQUEST, 'Invalid Request: jsonrpc must be "2.0"')
    if not isinstance(method, str):
        why = "no method" if method is None else "the method must be a string"
        return _refused(request_id, t.INVALID_REQUEST, f"Invalid Request: {why}")
    # Only the params are wrong: an object, or absent, is what every MCP method takes.
    if request_id is None:
        return Refusal(answer=None, reason="notification with params that are not an object")
    if method not in KNOWN_METHODS:
        return _refused(request_id, t.METHOD_NOT_FOUND, "Method not found")
    return _refused(request_id, t.INVALID_PARAMS, "Invalid params: params must be an object")


def _usable_id(value: dict[str, object]) -> t.RequestId | None:
    request_id = value.get("id")
    return request_id if isinstance(request_id, int | str) and not isinstance(request_id, bool) else None


def _refused(request_id: t.RequestId | None, code: int, message: str) -> Refusal:
    error = t.ErrorData(code=code, message=message)
    return Refusal(answer=t.JSONRPCError(jsonrpc="2.0", id=request_id, error=error), reason=message)


class Complaints:
    """The log lines about bad lines from the host: the first at once, then at most one every `LOG_EVERY` seconds,
    each counting the bad lines since the last one; what is left uncounted is told once the input ends. No line
    says what the host sent (it may hold secrets), only why it was refused. At info: the host has had its answer."""

    def __init__(self) -> None:
        self._last = float("-inf")
        self._unlogged = 0

    def note(self, refusal: Refusal) -> None:
        now = time.monotonic()
        if now - self._last < LOG_EVERY:
            self._unlogged += 1
            return
        code = refusal.answer.error.code if refusal.answer else None
        log.info("stdio_bad_line", reason=refusal.reason, code=code, more_since_last=self._unlogged)
        self._last, self._unlogged = now, 0

    def close(self) -> None:
        if self._unlogged:
            log.info("stdio_bad_lines", count=self._unlogged)
            self._unlogged = 0
