"""Repeated log lines held back: a line of a kind already written less than `REPEAT_WINDOW` ago is counted, not
written, so that an error repeating in a loop (an accept loop failing with "Too many open files", a child writing
its stderr as fast as it can, a child reconnecting) costs a line a second, not a disk.

A kind is the logger and what the line says, as a template: its first line with every word that holds a digit
blanked (a file descriptor, a port, an id). For our own lines that is the event and its fields that say what it is
about (`IDENTITY`: the child, the tool, the error, a child's stderr line); for a library's, its message. So a child
writing the same line in a loop is held back, and a line it writes once among them is not. Lines below warning are
never held back, except the events in `FLOOD_PRONE`, which come from outside at info level.

Lines that all differ are no repeats, so the events in `FLOOD_PRONE` are also held back by their source (the event
and the child it is about): past the repeats, at most `SOURCE_BUDGET` lines of a source are written per window, the
others counted. A source over its budget is known before its next line is even formatted (`held_back`), so that a
child writing 50,000 lines a second costs the event loop a counter each, not a log line each.

What was held back is told, never lost silently: the next line of the kind (or the source) written carries
`repeated=N`, the count of lines of its kind (or source) not written before it; and when a kind or a source goes
quiet, a line it held back is written once its window has passed (by a timer thread), carrying the count of the
others. Every line is thus written or counted.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

# At most one line of a kind is written per this many seconds.
REPEAT_WINDOW = 1.0
# The kinds remembered at once, the least recently seen forgotten first: a flood of lines that all differ (and so
# are never held back) cannot grow the memory without bound.
MAX_KINDS = 1024
# Our own events held back at any level, and by their source: each is what a child can make us log as fast as it
# likes (its stderr, its stdout, questions it asks that are declined or fail, its tool-list changes).
FLOOD_PRONE = frozenset(
    {"child_stderr", "child_bad_output", "child_question_declined", "child_question_failed", "child_tools_changed"}
)
# Lines of one source of a FLOOD_PRONE event (one child's stderr, say) written per window: enough to see what a child
# says, too few to flood a disk or a host's log.
SOURCE_BUDGET = 20
# Characters of a message or field that make its kind (past them, lines differ in details only).
KIND_CHARS = 120
# The fields of our own lines that are part of their kind.
IDENTITY = ("server", "tool", "error", "line")
# The record attribute that carries the count of a kind's lines held back before it (logs.py writes it as a field).
REPEATED = "_meta_agent_repeated"
_NUMBERED = re.compile(r"\S*\d\S*")
# A timer may wake a little early; a kind this close to the end of its window counts as due.
_SLACK = 0.01

Kind = tuple[str, ...]


def source_of(logger: str, event: object) -> Kind | None:
    """The source of a line of ours (`event` is its event dict) held to `SOURCE_BUDGET`, or None if it is not."""
    if not isinstance(event, dict) or event.get("event") not in FLOOD_PRONE:
        return None
    return logger, str(event["event"]), str(event.get("server"))


def kind_of(record: logging.LogRecord) -> Kind | None:
    """The kind of `record`, or None for a line that is never held back."""
    if isinstance(record.msg, dict):  # one of ours: structlog hands the event dict on as the message
        event = str(record.msg.get("event"))
        if record.levelno < logging.WARNING and event not in FLOOD_PRONE:
            return None
        return record.name, event, *(_template(record.msg.get(field, "")) for field in IDENTITY)
    if record.levelno < logging.WARNING:
        return None
    return record.name, _template(record.msg)


def _template(value: object) -> str:
    return _NUMBERED.sub("#", str(value).partition("\n")[0][:KIND_CHARS])


@dataclass
class _Seen:
    last: float  # when the window began: a line of the kind was written
    written: int = 1  # lines of the kind written in the window
    held: int = 0  # lines of the kind not written since the last one that was
    latest: logging.LogRecord | None = None  # one of them, written when the kind goes quiet


class Repeats:
    """The kinds seen lately and their lines held back past `allowance` lines a window; `write` writes a late line
    (from the timer's thread too)."""

    def __init__(self, write: Callable[[logging.LogRecord], object], allowance: int = 1) -> None:
        self._write = write
        self._allowance = allowance
        self._kinds: OrderedDict[Kind, _Seen] = OrderedDict()
        self._waiting: set[Kind] = set()  # the kinds with lines held back
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def admit(self, kind: Kind, record: logging.LogRecord, weight: int = 1) -> int | None:
        """None: hold `record` back (it is counted, as `weight` lines: itself and those it already stands for); else
        write it, telling the count of its kind held back before."""
        now = time.monotonic()
        with self._lock:
            seen = self._kinds.get(kind)
            if seen is not None and now - seen.last < REPEAT_WINDOW:
                if seen.written < self._allowance:
                    seen.written += 1
                    return 0
                seen.held += weight
                seen.latest = record
                self._waiting.add(kind)
                self._arm(now)
                return None
            self._kinds[kind] = _Seen(now)
            self._kinds.move_to_end(kind)
            self._waiting.discard(kind)
            forgotten = self._kinds.popitem(last=False) if len(self._kinds) > MAX_KINDS else None
            if forgotten is not None:
                self._waiting.discard(forgotten[0])
        if forgotten is not None:
            self._write_held(forgotten[1])
        return seen.held if seen is not None else 0

    def held_back(self, kind: Kind) -> bool:
        """Whether `kind` is holding its lines back now; if so, one more is counted (a line dropped before it was
        even made: the line already held back is the one written, with the count)."""
        now = time.monotonic()
        with self._lock:
            seen = self._kinds.get(kind)
            if seen is None or seen.latest is None or now - seen.last >= REPEAT_WINDOW:
                return False
            seen.held += 1
            return True

    def close(self) -> None:
        """Write every line still held back (the process is ending); no timer is left running."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            held = [self._kinds[kind] for kind in self._waiting]
            self._waiting.clear()
        for seen in held:
            self._write_held(seen)

    def _arm(self, now: float) -> None:
        """Under the lock: have the timer wake when the first waiting kind's window ends."""
        if self._timer is None and self._waiting:
            due = min(self._kinds[kind].last for kind in self._waiting) + REPEAT_WINDOW
            self._timer = threading.Timer(max(due - now, 0.0), self._on_time)
            self._timer.daemon = True  # never holds the process up: close() writes what it would have
            self._timer.start()

    def _on_time(self) -> None:
        """In the timer's thread: write the last held line of each kind whose window has ended."""
        now = time.monotonic()
        with self._lock:
            self._timer = None
            due = [kind for kind in self._waiting if now - self._kinds[kind].last >= REPEAT_WINDOW - _SLACK]
            held = []
            for kind in due:
                self._waiting.discard(kind)
                held.append(self._kinds[kind])
                self._kinds[kind] = _Seen(now)
            self._arm(now)
        for seen in held:
            self._write_held(seen)

    def _write_held(self, seen: _Seen) -> None:
        """Write the last line held back of a kind, with the count of the others."""
        if seen.latest is None:
            return
        if seen.held > 1:
            setattr(seen.latest, REPEATED, seen.held - 1)
        self._write(seen.latest)
