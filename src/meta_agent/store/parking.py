"""The rounds of parked runs, shared by the replicas of one PostgreSQL database (README, Replicas on PostgreSQL).

A 2026-07-28 caller's run that stops to ask runs on the replica that started it, but the caller's retry carrying
the answer may reach any replica. So with PostgreSQL every parked run has a row: its latest outcome (the round asking
the question numbered `asked`, or the call's result once `final`) and the answer given to it (`answered`, the one
update that takes it, so that a question is answered once, whichever replica the retry reached). The replica that
took an answer waits for the run's next outcome and reports the run's progress meanwhile, which the run's replica
sends it as notifications (`pg_notify`, channel `meta_agent_parked`), as it does each change of a row; a listener per
replica wakes whoever waits. A waiter also looks again every `LOOK_AGAIN` seconds, in case a notification was lost
with a connection.

A parked run that is an MCP task's also looks, as it waits for an answer, whether its task was cancelled (through any
replica): a cancel's notification lost with a connection still stops it.

A row holds whose run it is (`owner`, the subject of the caller that started it): an answer is taken only from that
owner, whoever else holds the round's request state; anyone else is told what a run no longer parked gets.

The run's replica renews its rows' `alive_until`; a row whose mark lapsed is a run whose replica stopped: whoever
waits for it stops waiting, its question is no longer pending, and no answer is taken for it. A task's run resumed by
another replica (durable runs) opens the row again there, numbering its questions on after the last one asked, so
that an answer to a question of the dead replica can never be taken for one asked since. Rows are deleted once their
result is collected, or long after they lapsed.

This module speaks JSON: what an outcome or an answer holds is the front's business.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import structlog
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from meta_agent.store.database import Database, Sql

log = structlog.get_logger(__name__)

CHANNEL = "meta_agent_parked"
# A waiter reads its row again this often even without a notification.
LOOK_AGAIN = 1.0
DRAIN_SECONDS = 0.05  # after the socket turned readable, how long to wait for a notification more
# A lapsed row is deleted after this long (no caller can come back to it: sealed request states last 600 s).
FORGET_AFTER = 600.0
# A notification's payload is at most 8000 bytes; a progress message is cut well below.
MESSAGE_CHARS = 2000


@dataclass(frozen=True)
class Outcome:
    """A parked run's latest outcome: `body`, the round asking question `asked`, or the result when `final`."""

    asked: int
    body: dict[str, Any]
    final: bool


@dataclass(frozen=True)
class Note:
    """A notification about one parked run: its row changed, a progress message for its live round, or its caller
    went away (cancel)."""

    parked_id: str
    kind: str
    tick: int = 0
    message: str = ""


class SharedRounds:
    """This replica's view of every replica's parked runs."""

    def __init__(self, database: Database, url: str, replica: str, *, alive_seconds: float) -> None:
        self.database = database
        self.url = url
        self.replica = replica
        self.alive_seconds = alive_seconds
        self._subscribers: dict[str, set[MemoryObjectSendStream[Note]]] = {}
        self._on_cancel: dict[str, Callable[[], None]] = {}
        # what a cancel note for a run not parked here does: a durable run this replica resumed may be its
        self.cancel_elsewhere: Callable[[str], None] | None = None

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """Listen for notifications and renew this replica's rows while entered."""
        async with anyio.create_task_group() as tg:
            await tg.start(self._listen)
            tg.start_soon(self._renew)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()

    async def secret(self) -> bytes:
        """The key every replica seals request states with: made by the first replica, read by the others."""
        value = await self._run(_secret, os.urandom(32).hex())
        return bytes.fromhex(value)

    # -- the run's replica ------------------------------------------------------------------------------------------

    async def opened(self, parked_id: str, on_cancel: Callable[[], None], owner: str) -> int:
        """`owner`'s run parked here; `on_cancel` is called when the caller of a round on another replica goes
        away. The number of the last question asked under this id before (0: none; a task's run this replica resumed
        after its replica stopped goes on from there)."""
        self._on_cancel[parked_id] = on_cancel
        asked: int = await self._run(_open, parked_id, self.replica, time.time() + self.alive_seconds, owner)
        return asked

    async def running(self, parked_id: str, run_id: str) -> None:
        """The parked run's run id (a caller whose round outlived the run's replica is told where to read it)."""
        await self._run(_run_id, parked_id, run_id)

    async def post(self, parked_id: str, outcome: Outcome) -> None:
        await self._run(_post, parked_id, outcome.asked, json.dumps(outcome.body), outcome.final)

    async def answer_to(self, parked_id: str, asked: int) -> dict[str, Any] | None:
        """Wait for the answer to question `asked` given through another replica (None: the row is gone). A run that
        is a task cancelled meanwhile is cancelled here, as by its note (which may have been lost with a connection)."""
        async with self._subscribed(parked_id) as notes:
            while True:
                row = await self._run(_answer, parked_id, asked)
                if row is None:
                    return None
                answered_by, answer, cancelled = row
                if cancelled and (cancel := self._on_cancel.get(parked_id)) is not None:
                    cancel()
                    return None
                if answered_by is not None and answered_by != self.replica:
                    return dict(json.loads(answer))
                with anyio.move_on_after(LOOK_AGAIN):
                    await _next_change(notes)

    async def progress(self, parked_id: str, tick: int, message: str) -> None:
        """Report `message` to the round on another replica."""
        await self.notify(Note(parked_id, "progress", tick, message[:MESSAGE_CHARS]))

    def ended(self, parked_id: str) -> None:
        self._on_cancel.pop(parked_id, None)

    # -- any replica ------------------------------------------------------------------------------------------------

    async def answer(self, parked_id: str, asked: int, responses: dict[str, Any], owner: str) -> str | None:
        """Give `owner`'s answer to question `asked`: None if it is taken, else "gone" (`owner` has no such parked
        run) or "answered" (that question is not the one pending, or was answered already)."""
        answer = json.dumps(responses)
        refused: str | None = await self._run(_give_answer, parked_id, asked, answer, self.replica, owner, time.time())
        return refused

    async def answer_and_follow(
        self, parked_id: str, asked: int, responses: dict[str, Any], owner: str, report: Callable[[int, str], Any]
    ) -> tuple[str | None, Outcome | None, str | None]:
        """Give `owner`'s answer to question `asked` (as `answer`), then wait for the run's outcome that follows it,
        reporting the run's progress meanwhile: (why the answer was not taken, None, None), or (None, the outcome,
        the run's id); the outcome is None if the run's replica stopped first, and a result is collected (its row
        deleted). The wait listens before the answer is given: the run's first progress after it may come at once."""
        async with self._subscribed(parked_id) as notes:
            if (refused := await self.answer(parked_id, asked, responses, owner)) is not None:
                return refused, None, None
            outcome, run_id = await self._follow(parked_id, asked, notes, report)
            return None, outcome, run_id

    async def _follow(
        self,
        parked_id: str,
        after: int,
        notes: MemoryObjectReceiveStream[Note],
        report: Callable[[int, str], Any],
    ) -> tuple[Outcome | None, str | None]:
        """Wait for the outcome that follows question `after`, reporting the progress `notes` bring meanwhile."""
        while True:
            row = await self._run(_read, parked_id)
            if row is None:
                return None, None
            outcome, alive_until, run_id = row
            if outcome is not None and (outcome.final or outcome.asked > after):
                while True:  # the progress sent before the outcome, not yet reported (a look without a note)
                    try:
                        note = notes.receive_nowait()
                    except anyio.WouldBlock:
                        break
                    if note.kind == "progress":
                        await report(note.tick, note.message)
                if outcome.final:
                    await self._run(_delete, parked_id)
                return outcome, run_id
            if alive_until is None or alive_until < time.time():
                return None, run_id
            with anyio.move_on_after(LOOK_AGAIN):
                while (note := await notes.receive()).kind == "progress":
                    await report(note.tick, note.message)

    async def pending(self, parked_id: str) -> Outcome | None:
        """The round of the question a run parked on any replica waits on, not yet answered; None: none is (the
        question of a replica that stopped is not: its run, resumed elsewhere, asks again)."""
        outcome: Outcome | None = await self._run(_pending, parked_id, time.time())
        return outcome

    async def collected(self, parked_id: str) -> None:
        """The result was collected by a round on this replica."""
        await self._run(_delete, parked_id)

    async def notify(self, note: Note) -> None:
        payload = json.dumps([note.parked_id, note.kind, note.tick, note.message])
        await self._run(_notify, payload)

    # -- below ------------------------------------------------------------------------------------------------------

    async def _run(self, work: Callable[..., Any], *args: Any) -> Any:
        return await self.database.call(work, *args)

    @asynccontextmanager
    async def _subscribed(self, parked_id: str) -> AsyncIterator[MemoryObjectReceiveStream[Note]]:
        send, receive = anyio.create_memory_object_stream[Note](math.inf)
        self._subscribers.setdefault(parked_id, set()).add(send)
        try:
            yield receive
        finally:
            subscribers = self._subscribers[parked_id]
            subscribers.discard(send)
            if not subscribers:
                del self._subscribers[parked_id]
            send.close()
            receive.close()

    async def _listen(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Hand each notification to whoever waits on its run; connect again if the connection is lost."""
        import psycopg

        started = False
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as connection:
                    await connection.execute(f"listen {CHANNEL}")
                    if not started:
                        task_status.started()
                        started = True
                    async for payload in _notified(connection):
                        self._deliver(payload)
            except (psycopg.Error, OSError) as exc:
                log.warning("parked_rounds_not_heard", error=str(exc), database=self.database.label)
                if not started:
                    task_status.started()
                    started = True
                await anyio.sleep(LOOK_AGAIN)

    def _deliver(self, payload: str) -> None:
        try:
            parked_id, kind, tick, message = json.loads(payload)
        except (ValueError, TypeError):
            return
        if kind == "cancel":
            if (cancel := self._on_cancel.get(parked_id)) is not None:
                cancel()
            elif self.cancel_elsewhere is not None:
                self.cancel_elsewhere(parked_id)
            return
        for send in self._subscribers.get(parked_id, ()):
            send.send_nowait(Note(parked_id, kind, tick, message))

    async def _renew(self) -> None:
        while True:
            await anyio.sleep(self.alive_seconds / 3)
            try:
                await self._run(_renew, self.replica, time.time(), self.alive_seconds)
            except self.database.errors as exc:
                log.warning("parked_rounds_not_renewed", error=str(exc), database=self.database.label)


async def _notified(connection: Any) -> AsyncIterator[str]:
    """The payloads of the notifications `connection` (psycopg's, listening) receives, as they come. The event loop
    wakes only when its socket has something to read: psycopg's own `notifies()` wakes it ten times a second to look
    (its wait interval), what an idle replica spent most on of its own."""
    while True:
        # what came with the last statement, or since: read until a short look finds nothing more
        async for notification in connection.notifies(timeout=DRAIN_SECONDS):
            yield notification.payload
        await anyio.wait_readable(connection.pgconn.socket)


async def _next_change(notes: MemoryObjectReceiveStream[Note]) -> None:
    while (await notes.receive()).kind != "changed":
        pass


def _secret(sql: Sql, made: str) -> str:
    sql.execute(
        "insert into meta_agent_secrets (name, value) values ('request_state', ?) on conflict do nothing", (made,)
    )
    row = sql.one("select value from meta_agent_secrets where name = 'request_state'")
    assert row is not None
    return str(row[0])


def _open(sql: Sql, parked_id: str, replica: str, alive_until: float, owner: str) -> int:
    """Open the run's row here, taking over the row of a replica that stopped (a resumed task's run): its outcome and
    any answer to it go, its numbering stays."""
    row = sql.one("select asked from parked_rounds where id = ?", (parked_id,))
    if row is None:
        sql.execute(
            "insert into parked_rounds (id, replica, asked, alive_until, owner) values (?, ?, 0, ?, ?)",
            (parked_id, replica, alive_until, owner),
        )
        return 0
    sql.execute(
        "update parked_rounds set replica = ?, alive_until = ?, owner = ?, outcome = null, final = 0,"
        " answered_by = null, answer = null where id = ?",
        (replica, alive_until, owner, parked_id),
    )
    _changed(sql, parked_id)
    return int(row[0])


def _run_id(sql: Sql, parked_id: str, run_id: str) -> None:
    sql.execute("update parked_rounds set run_id = ? where id = ?", (run_id, parked_id))


def _post(sql: Sql, parked_id: str, asked: int, body: str, final: bool) -> None:
    sql.execute(
        "update parked_rounds set asked = ?, outcome = ?, final = ?, answered_by = null, answer = null where id = ?",
        (asked, body, int(final), parked_id),
    )
    _changed(sql, parked_id)


def _answer(sql: Sql, parked_id: str, asked: int) -> tuple[str | None, str | None, bool] | None:
    row = sql.one(
        "select p.asked, p.answered_by, p.answer, t.cancelled from parked_rounds p left join tasks t on t.id = p.id"
        " where p.id = ?",
        (parked_id,),
    )
    if row is None:
        return None
    cancelled = bool(row[3])  # a task's, through any replica
    return (row[1], row[2], cancelled) if row[0] == asked else (None, None, cancelled)


def _give_answer(sql: Sql, parked_id: str, asked: int, answer: str, replica: str, owner: str, at: float) -> str | None:
    taken = sql.execute(
        "update parked_rounds set answered_by = ?, answer = ? where id = ? and owner = ? and asked = ? and final = 0"
        " and answered_by is null and alive_until >= ?",
        (replica, answer, parked_id, owner, asked, at),
    )
    if taken:
        _changed(sql, parked_id)
        return None
    row = sql.one("select 1 from parked_rounds where id = ? and owner = ?", (parked_id, owner))
    return "gone" if row is None else "answered"


def _read(sql: Sql, parked_id: str) -> tuple[Outcome | None, float | None, str | None] | None:
    row = sql.one("select asked, outcome, final, alive_until, run_id from parked_rounds where id = ?", (parked_id,))
    if row is None:
        return None
    asked, body, final, alive_until, run_id = row
    outcome = None if body is None else Outcome(int(asked), json.loads(body), bool(final))
    return outcome, alive_until, run_id


def _pending(sql: Sql, parked_id: str, at: float) -> Outcome | None:
    row = sql.one(
        "select asked, outcome from parked_rounds where id = ? and final = 0 and answered_by is null"
        " and outcome is not null and alive_until >= ?",
        (parked_id, at),
    )
    return None if row is None else Outcome(int(row[0]), json.loads(row[1]), final=False)


def _delete(sql: Sql, parked_id: str) -> None:
    sql.execute("delete from parked_rounds where id = ?", (parked_id,))


def _renew(sql: Sql, replica: str, at: float, alive_seconds: float) -> None:
    alive_until = at + alive_seconds
    sql.execute("update parked_rounds set alive_until = ? where replica = ? and final = 0", (alive_until, replica))
    sql.execute("delete from parked_rounds where alive_until < ?", (at - FORGET_AFTER,))


def _changed(sql: Sql, parked_id: str) -> None:
    _notify(sql, json.dumps([parked_id, "changed", 0, ""]))


def _notify(sql: Sql, payload: str) -> None:
    sql.execute(f"select pg_notify('{CHANNEL}', ?)", (payload,))
