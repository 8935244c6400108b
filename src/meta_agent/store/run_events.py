"""Each run's events as its views show them (the apps, the console): rows of JSON bodies numbered from 1 in the order
the run emitted them, so any replica answers "what happened after event N" for a run another replica is running.

What goes in a body is records/run_feed.py's; this module only keeps and reads them. A page read is bounded in rows and
in characters, so a view polling a run with huge events is answered in pages.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio

from meta_agent.store.database import Database, Sql, one_statement

# At most this many events, and about this many characters of them, in one page a view reads.
PAGE_EVENTS = 200
PAGE_CHARS = 1_000_000
# The largest cursor a view may give: what both databases' integers hold and a page's script counts exactly (2**53).
MAX_CURSOR = 2**53
# Events written by one statement at most (three parameters each: far below either database's limit).
ROWS_AT_ONCE = 200


@dataclass
class _Batch:
    """A run's events waiting to be written with other runs' (`RunEvents.append`)."""

    run_id: str
    bodies: list[tuple[int, str]]
    written: anyio.Event = field(default_factory=anyio.Event)
    error: Exception | None = None


class RunEvents:
    def __init__(self, database: Database) -> None:
        self.database = database
        self.errors = database.errors
        self._queued: list[_Batch] = []  # batches handed in and not taken by a write yet
        self._writing: anyio.Event | None = None  # set when the write under way ends; None: none is

    async def append(self, run_id: str, bodies: Sequence[tuple[int, str]]) -> None:
        """Keep the run's events `bodies` (each its number and JSON body); one already kept is kept as it was.

        Runs that append at once share a transaction: whoever finds no write under way writes everything queued
        (shielded: the others' batches too), once; those queued meanwhile wait for it to end, and the first of them
        writes the next round. So many runs cost a transaction or two together, not one each, and none waits longer
        than two writes.

        Raises:
            errors: the database cannot be written.
        """
        if not bodies:
            return
        batch = _Batch(run_id, list(bodies))
        self._queued.append(batch)
        while not batch.written.is_set():
            if self._writing is not None:
                await self._writing.wait()
                continue
            self._writing = anyio.Event()
            taken, self._queued = self._queued, []
            try:
                with anyio.CancelScope(shield=True):
                    await self._write(taken)
            finally:
                ended, self._writing = self._writing, None
                ended.set()
        if batch.error is not None:
            raise batch.error

    async def _write(self, batches: list[_Batch]) -> None:
        """Write `batches` in one transaction; each then says how it went to the run that handed it in."""
        try:
            rows = [(b.run_id, b.bodies) for b in batches]
            one = len(rows) == 1 and len(rows[0][1]) <= ROWS_AT_ONCE  # (a run writing alone: the usual case)
            await self.database.call(_append_one if one else _append_all, rows)
        except Exception as exc:  # each run is told, as if it had written alone (a bug of ours too: never a hang)
            for batch in batches:
                batch.error = exc
        for batch in batches:
            batch.written.set()

    async def last(self, run_id: str) -> int:
        """The number of the run's last kept event (0: none): where a run resumed on another replica goes on.

        Raises:
            errors: the database cannot be read.
        """
        return await self.database.call(_last, run_id)

    async def line(self, run_id: str) -> str | None:
        """The progress line of the run's latest event that has one (None: none kept yet).

        Raises:
            errors: the database cannot be read.
        """
        return await self.database.call(_line, run_id)

    async def page(self, run_id: str, after: int) -> tuple[list[tuple[int, str]], bool]:
        """The run's events numbered after `after`, in order, at most a page of them, and whether more follow.

        Raises:
            errors: the database cannot be read.
        """
        return await self.database.call(_page, run_id, after)


def _append_all(sql: Sql, batches: list[tuple[str, list[tuple[int, str]]]]) -> None:
    for run_id, bodies in batches:
        _append(sql, run_id, bodies)


@one_statement
def _append_one(sql: Sql, batches: list[tuple[str, list[tuple[int, str]]]]) -> None:
    """One run's batch of ROWS_AT_ONCE rows at most."""
    _append_all(sql, batches)


def _append(sql: Sql, run_id: str, bodies: list[tuple[int, str]]) -> None:
    # one statement per ROWS_AT_ONCE rows: a statement is a round trip to PostgreSQL
    for start in range(0, len(bodies), ROWS_AT_ONCE):
        rows = bodies[start : start + ROWS_AT_ONCE]
        sql.execute(
            "insert into run_events (run_id, seq, body) values "
            + ", ".join(["(?, ?, ?)"] * len(rows))
            + " on conflict (run_id, seq) do nothing",
            [value for seq, body in rows for value in (run_id, seq, body)],
        )


def _last(sql: Sql, run_id: str) -> int:
    row = sql.one("select max(seq) from run_events where run_id = ?", (run_id,))
    return 0 if row is None or row[0] is None else int(row[0])


def _line(sql: Sql, run_id: str) -> str | None:
    # the last few: the marks a run's feed writes (resumed, dropped) have no line
    for (body,) in sql.all("select body from run_events where run_id = ? order by seq desc limit 4", (run_id,)):
        line = json.loads(body).get("line")
        if isinstance(line, str):
            return line
    return None


def _page(sql: Sql, run_id: str, after: int) -> tuple[list[tuple[int, str]], bool]:
    rows = sql.all(
        "select seq, body from run_events where run_id = ? and seq > ? order by seq limit ?",
        (run_id, after, PAGE_EVENTS + 1),
    )
    page: list[tuple[int, str]] = []
    chars = 0
    for seq, body in rows[:PAGE_EVENTS]:
        if page and chars + len(body) > PAGE_CHARS:
            return page, True
        page.append((int(seq), str(body)))
        chars += len(body)
    return page, len(rows) > PAGE_EVENTS
