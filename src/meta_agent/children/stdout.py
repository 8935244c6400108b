"""A stdio child's stdout, line by line: each line a JSON-RPC message for the session, or the error reading it.

No line is held past `LINE_LIMIT`: a longer one is dropped as its bytes come (meta_agent.shared.bounded_lines) and
handed on as an `OverlongLine` error, which the session reports as the child's bad output (one log line; the connection
goes on). If that line was the child's answer to one of our requests, that request gets an error in the child's place at
once, so that its caller is not left waiting for the call's timeout: the id is read from the line's first and last
bytes, where a response's short members sit beside its one large value, whichever order its SDK writes them in.
"""

from __future__ import annotations

import json

import mcp.types as t
from mcp import StdioServerParameters
from mcp.shared.message import SessionMessage

from meta_agent.shared.bounded_lines import Overlong

# The longest line read from a child, in bytes: what one message may take in memory before it is parsed. As for a
# host (front/stdio/lines.py): a result this long is more than a model reads whole, and a child writing without end
# must not grow our memory with it.
LINE_LIMIT = 16 * 2**20
DROPPED = f"over {LINE_LIMIT // 2**20} MiB, dropped unread"


class OverlongLine(ValueError):
    """A line of a child's stdout over `LINE_LIMIT`."""


def received(line: bytes | Overlong, params: StdioServerParameters) -> list[SessionMessage | Exception]:
    """What the session is handed for one line of the child's stdout: its message or the error parsing it; for a
    line over the limit, the error saying so and, if it answered a request, that request's error answer."""
    if isinstance(line, bytes):
        return [parsed(line.decode(params.encoding, params.encoding_error_handler))]
    handed: list[SessionMessage | Exception] = [OverlongLine(f"a line on stdout {DROPPED}")]
    request_id = answered_id(line)
    if request_id is not None:
        error = t.ErrorData(code=t.INTERNAL_ERROR, message=f"the child's answer was {DROPPED}")
        handed.append(SessionMessage(t.JSONRPCError(jsonrpc="2.0", id=request_id, error=error)))
    return handed


def parsed(line: str) -> SessionMessage | Exception:
    try:
        return SessionMessage(t.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:  # the session hands it on: a child writing non-protocol output to stdout
        return exc


def answered_id(line: Overlong) -> t.RequestId | None:
    """The id of the response `line` was, as the members at its ends say; None if they name none, or say it is a
    request or a notification (which have a method)."""
    members = _leading_members(line.head) | _trailing_members(line.tail)
    request_id = members.get("id")
    if "method" in members or isinstance(request_id, bool) or not isinstance(request_id, int | str):
        return None
    return request_id


def _leading_members(head: bytes) -> dict[str, object]:
    """The members before the first large value of the object `head` begins: the longest part of it up to a comma
    that closes as an object."""
    for cut in reversed(_commas(head)):
        members = _object(head[:cut] + b"}")
        if members is not None:
            return members
    return {}


def _trailing_members(tail: bytes) -> dict[str, object]:
    """The members after the last large value of the object `tail` ends: the longest part of it after a comma that
    opens as an object."""
    for cut in _commas(tail):
        members = _object(b"{" + tail[cut + 1 :])
        if members is not None:
            return members
    return {}


def _commas(data: bytes) -> list[int]:
    return [at for at, byte in enumerate(data) if byte == ord(",")]


def _object(text: bytes) -> dict[str, object] | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # not JSON (or not UTF-8): the cut fell inside a value
        return None
    return value if isinstance(value, dict) else None
