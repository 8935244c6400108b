"""Lines of a byte stream whose writer is not trusted (a host's stdin, a child's stdout), none held past a limit.

A line longer than the limit is dropped as its bytes come, so that a writer sending gigabytes without a newline costs
no memory; only its first and last `EDGE` bytes are kept, which is where a JSON-RPC message says what it answers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

# Bytes kept of each end of a line over the limit: room for a JSON-RPC message's members beside its one large value.
EDGE = 1024


@dataclass(frozen=True)
class Overlong:
    """A line over the limit, dropped as it came: its first and last `EDGE` bytes (without its line end)."""

    head: bytes
    tail: bytes


async def lines_within(receive: Callable[[], Awaitable[bytes]], limit: int) -> AsyncIterator[bytes | Overlong]:
    """Each line (with its newline) of what `receive` returns until it returns b"", the last perhaps without one;
    an `Overlong` in place of a line longer than `limit` bytes, whose bytes are dropped as they come. A long line
    costs linear time: only the bytes that came since the last look are searched for its end."""
    pending = bytearray()
    head: bytes | None = None  # the start of a line over the limit, until its end; `pending` keeps only its last bytes
    while chunk := await receive():
        scanned = len(pending)
        pending += chunk
        start = 0
        while (end := pending.find(b"\n", max(start, scanned))) >= 0:
            if head is not None or end - start > limit:
                first = head if head is not None else bytes(pending[start : min(start + EDGE, end)])
                yield Overlong(first, bytes(pending[max(start, end - EDGE) : end]))
                head = None
            else:
                yield bytes(pending[start : end + 1])
            start = end + 1
        del pending[:start]
        if head is not None or len(pending) > limit:
            head = head if head is not None else bytes(pending[:EDGE])
            del pending[:-EDGE]
    if head is not None:
        yield Overlong(head, bytes(pending[-EDGE:]))
    elif pending:
        yield bytes(pending)
