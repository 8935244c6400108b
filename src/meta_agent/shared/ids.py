"""Ids that cannot be guessed from others.

`ULID()` is monotonic within a millisecond: an id made right after another is that id plus one. An id that is a
handle for whoever holds it (an MCP task's) must not be derivable from ids its holder may see (run ids are shown in
tool errors, log lines and `meta-agent runs`), so its 80 random bits are drawn afresh.
"""

from __future__ import annotations

import secrets
import time

from ulid import ULID


def random_ulid() -> str:
    """A ULID of now whose random part is drawn afresh: it sorts by time, and shares no counter with another id."""
    milliseconds = time.time_ns() // 1_000_000
    return str(ULID.from_bytes(milliseconds.to_bytes(6, "big") + secrets.token_bytes(10)))
