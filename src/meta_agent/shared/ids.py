"""Ids that cannot be guessed from others.

`ULID()` is monotonic within a millisecond: an id made right after another is that id plus one. An id that is a
handle for whoever holds it (an MCP task's) must not be derivable from ids its holder may see (run ids are shown in
tool errors, log lines and `meta-agent runs`), so its 80 random bits are drawn afresh. An id that must not even tell
when it was made, nor share a prefix with an id made in the same millisecond (a conversation's, whose run id its
holder sees), is random through and through.
"""

from __future__ import annotations

import secrets
import time

from ulid import ULID


def random_ulid() -> str:
    """A ULID of now whose random part is drawn afresh: it sorts by time, and shares no counter with another id."""
    milliseconds = time.time_ns() // 1_000_000
    return str(ULID.from_bytes(milliseconds.to_bytes(6, "big") + secrets.token_bytes(10)))


def random_id() -> str:
    """An id shaped as a ULID (26 characters of Crockford base32) whose 128 bits are all random: no time, no counter,
    as hard to guess as a token."""
    return str(ULID.from_bytes(secrets.token_bytes(16)))
