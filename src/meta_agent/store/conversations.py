"""Conversations that continue: each `agent` or `ask` call returns a `conversation_id`; passing it back continues the
same transcript. Stored in the database (meta_agent.store.database: embedded SQLite, or PostgreSQL shared by
replicas; either survives a restart) and bounded: when a transcript grows past
`MAX_CHARS`, its oldest whole turns are dropped and the result says so.

Turns of one conversation are serialised: a turn holds its conversation from loading it to saving it, and another
turn of it waits meanwhile, then starts from the transcript that one saved. In one process the hold is a lock; across
processes sharing the database it is a lease in the conversation's row (`holder`, `held_until`), taken by a
conditional update, renewed while the turn runs and checked when it saves, so a process that dies holding one frees
it within `LEASE_SECONDS`. The same conditional updates work on PostgreSQL, where replicas share conversations
(README, Replicas on PostgreSQL).

A conversation is its owner's (the subject of the caller that started it, meta_agent.front.auth.subjects): another owner
presenting its id is told what an unknown id gets, before waiting for anything, and so are the tools allowed for
the rest of it. New conversations get ids that are random through and through (meta_agent.shared.ids.random_id):
nothing of their run's id, or of the time, gives them away.

What is stored of a transcript, and how it is trimmed and read back, is in meta_agent.records.transcripts.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import structlog
from ulid import ULID

from meta_agent.core.messages import Message, jsonable
from meta_agent.errors import ConfigError, ConversationLost
from meta_agent.records.transcripts import answered, decode, trim
from meta_agent.shared.ids import random_id
from meta_agent.store.database import LOCAL_OWNER, Database, Sql, now, one_statement

log = structlog.get_logger(__name__)
T = TypeVar("T")

# A turn's hold lasts this long past its last renewal: a process that dies holding a conversation frees it this soon.
LEASE_SECONDS = 30.0
# No turn writes a hold ending further ahead than a lease; one that does is taken over (see `_take`).
LONGEST_HOLD = 10 * LEASE_SECONDS
# Renewed three times a lease, so one slow renewal (a busy database) does not lose it.
RENEWALS_PER_LEASE = 3
# How often a turn waiting for a conversation another process holds looks again; a turn takes seconds.
WAIT_POLL_SECONDS = 0.1
# A turn waiting for its conversation tells its caller this often (hosts reset their timeout on progress).
WAIT_NOTICE = 10.0
Waiting = Callable[[float], Awaitable[None]]  # told the seconds a turn has waited for its conversation so far


async def _awaited_with_notices(work: Awaitable[T], waiting: Waiting | None, every: float) -> T:
    """`await work`, telling `waiting` every `every` seconds how long it has taken so far."""
    if waiting is None:
        return await work

    async def tell() -> None:
        started = anyio.current_time()
        while True:
            await anyio.sleep(every)
            await waiting(anyio.current_time() - started)

    failure: Exception | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(tell)
        try:
            result = await work
        except Exception as exc:
            failure = exc
        tg.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return result


@dataclass(frozen=True, kw_only=True)
class Turn:
    """One turn's hold on its conversation: the id, the transcript so far, the token of the hold (None for a new
    conversation, which nobody else can know of yet), and whose the conversation is."""

    conversation_id: str
    history: tuple[Message, ...]
    holder: str | None
    owner: str = LOCAL_OWNER


def default_path() -> Path:
    """`conversations.sqlite3` in the user data dir, as platformdirs finds it: on Linux
    $XDG_DATA_HOME/meta-agent/conversations.sqlite3, else under ~/.local/share/meta-agent; on macOS under
    ~/Library/Application Support; on Windows under %LOCALAPPDATA%."""
    from platformdirs import user_data_path  # on first use: importing it costs every command's start a few ms

    return user_data_path("meta-agent", appauthor=False) / "conversations.sqlite3"


class Conversations:
    """The store, on `database` (its calls run on worker threads, so the event loop never waits on it)."""

    def __init__(self, database: Database, *, lease_seconds: float = LEASE_SECONDS) -> None:
        """`lease_seconds`: how long a hold lasts past its last renewal (shorter in tests; `LONGEST_HOLD` at most)."""
        self.database = database
        self.wait_notice = WAIT_NOTICE
        self.lease_seconds = min(lease_seconds, LONGEST_HOLD)
        self._local: dict[str, tuple[anyio.Lock, int]] = {}  # conversation id → (its lock, turns holding or waiting)

    async def load(self, conversation_id: str, *, owner: str = LOCAL_OWNER) -> tuple[Message, ...]:
        """The stored transcript of `owner`'s conversation, without holding it.

        Raises:
            ConfigError: `owner` has no conversation with that id, or its record cannot be read.
        """
        row = await self._store(_select, conversation_id, owner)
        if row is None:
            raise unknown(conversation_id)
        return decode(conversation_id, row)

    async def allowed(self, conversation_id: str, *, owner: str = LOCAL_OWNER) -> set[str]:
        """The tools `owner` allowed for the rest of the conversation (what "allow for this session" means to a
        2026-07-28 caller over HTTP, which has no session), as any replica allowed them; none of another owner's.

        Raises:
            ConfigError: the database cannot be opened or read.
        """
        return {str(row[0]) for row in await self._store(_allowed, conversation_id, owner)}

    async def allow(self, conversation_id: str, tools: Iterable[str], *, owner: str = LOCAL_OWNER) -> None:
        """Remember `tools` as allowed by `owner` for the rest of the conversation.

        Raises:
            Database.errors: the store cannot be written.
        """
        await self.database.call(_allow, conversation_id, sorted(tools), owner)

    @asynccontextmanager
    async def turn(
        self,
        conversation_id: str | None,
        *,
        new_id: str | None = None,
        waiting: Waiting | None = None,
        owner: str = LOCAL_OWNER,
    ) -> AsyncIterator[Turn]:
        """Hold `owner`'s conversation for one turn (a new one when `conversation_id` is None, with id `new_id` if
        given): wait while another turn of it runs, in this process or another, then yield its transcript. Leaving
        lets the next turn go. While it waits, `waiting` hears every `WAIT_NOTICE` seconds how long it has waited (a
        caller's progress). Another owner's conversation is refused at once, as an unknown one is: it is not waited
        for.

        Raises:
            ConfigError: `owner` has no conversation with that id, its record cannot be read, or the store cannot be
                opened.
        """
        if conversation_id is None:
            yield Turn(conversation_id=new_id or random_id(), history=(), holder=None, owner=owner)
            return
        if not await self._store(_owns, conversation_id, owner):
            raise unknown(conversation_id)
        async with self._local_turn(conversation_id, waiting):
            claim = self._claim(conversation_id, owner)
            turn = await _awaited_with_notices(claim, waiting, self.wait_notice)
            failure: Exception | None = None
            try:
                async with anyio.create_task_group() as renewals:
                    renewals.start_soon(self._renew, turn)
                    try:
                        yield turn
                    except Exception as exc:
                        failure = exc
                    renewals.cancel_scope.cancel()
            finally:
                with anyio.CancelScope(shield=True):
                    await self._release(conversation_id, turn.holder)
            if failure is not None:
                raise failure

    async def save(self, turn: Turn, transcript: Sequence[Message]) -> int:
        """Store the turn's transcript, every tool call answered and trimmed to the bound; returns how many of its
        oldest turns were dropped.

        Raises:
            ConversationLost: another process took the conversation over (this turn's hold had lapsed); not saved.
            Database.errors: the store cannot be written.
            ValueError, RecursionError: the transcript cannot be encoded as JSON.
        """
        kept, dropped = trim(answered(transcript))
        # ASCII escapes: a lone surrogate (a model's "\ud800") is no UTF-8, and the database would refuse the text.
        body = json.dumps(kept, default=jsonable)
        if turn.holder is None:
            await self.database.call(_insert, turn.conversation_id, body, turn.owner)
        elif not await self.database.call(_update, turn, body):
            raise ConversationLost(
                f"conversation {turn.conversation_id!r}: another process took it over while this turn ran "
                f"(its hold lapsed after {self.lease_seconds:g} s without renewal); this turn was not saved"
            )
        return dropped

    def close(self) -> None:
        self.database.close()

    @asynccontextmanager
    async def _local_turn(self, conversation_id: str, waiting: Waiting | None) -> AsyncIterator[None]:
        """Turns of one conversation in this process, one at a time and in the order they came."""
        lock, users = self._local.get(conversation_id, (anyio.Lock(), 0))
        self._local[conversation_id] = (lock, users + 1)
        if users:
            log.info("conversation_waiting", conversation_id=conversation_id, why="another turn of it is running")
        try:
            await _awaited_with_notices(lock.acquire(), waiting, self.wait_notice)
            try:
                yield
            finally:
                lock.release()
        finally:
            lock, users = self._local[conversation_id]
            if users == 1:
                del self._local[conversation_id]
            else:
                self._local[conversation_id] = (lock, users - 1)

    async def _claim(self, conversation_id: str, owner: str) -> Turn:
        """Take the lease of `owner`'s conversation, waiting while another process holds it, and read its transcript."""
        holder = str(ULID())
        waited = False
        while True:
            row = await self._store(_take, conversation_id, holder, self.lease_seconds, owner)
            if row is None:
                raise unknown(conversation_id)
            taken, messages = row
            if taken:
                try:
                    history = decode(conversation_id, messages)
                    return Turn(conversation_id=conversation_id, history=history, holder=holder, owner=owner)
                except ConfigError:  # nobody can continue it, but it is not held either
                    with anyio.CancelScope(shield=True):
                        await self._release(conversation_id, holder)
                    raise
            if not waited:
                log.info("conversation_waiting", conversation_id=conversation_id, why="another process holds it")
                waited = True
            await anyio.sleep(WAIT_POLL_SECONDS)

    async def _renew(self, turn: Turn) -> None:
        while True:
            await anyio.sleep(self.lease_seconds / RENEWALS_PER_LEASE)
            try:
                held = await self.database.call(_extend, turn, self.lease_seconds)
            except (
                self.database.errors
            ) as exc:  # the next renewal may get through; the save will tell if the hold lapsed
                log.warning("conversation_not_renewed", conversation_id=turn.conversation_id, error=str(exc))
                continue
            if not held:
                log.warning("conversation_hold_lost", conversation_id=turn.conversation_id)
                return

    async def _release(self, conversation_id: str, holder: str | None) -> None:
        try:
            await self.database.call(_let_go, conversation_id, holder)
        except self.database.errors as exc:  # the lease runs out by itself
            log.warning("conversation_not_released", conversation_id=conversation_id, error=str(exc))

    async def _store(self, work: Callable[..., T], *args: Any) -> T:
        """`work` in a transaction, with a store that cannot be opened or read as one line naming it.

        Raises:
            ConfigError: the database cannot be opened or read, or its schema is newer than this code knows.
        """
        try:
            return await self.database.call(work, *args)
        except self.database.errors as exc:
            raise ConfigError(f"{self.database.label}: cannot read the conversations store: {exc}") from None


def unknown(conversation_id: str) -> ConfigError:
    """What a conversation id gets that names no conversation of the caller's: none at all, or another's."""
    return ConfigError(f"conversation_id: unknown conversation {conversation_id!r}")


def _owns(sql: Sql, conversation_id: str, owner: str) -> bool:
    return sql.one("select 1 from conversations where id = ? and owner = ?", (conversation_id, owner)) is not None


def _select(sql: Sql, conversation_id: str, owner: str) -> str | None:
    row = sql.one("select messages from conversations where id = ? and owner = ?", (conversation_id, owner))
    return None if row is None else str(row[0])


def _allowed(sql: Sql, conversation_id: str, owner: str) -> list[tuple[Any, ...]]:
    return sql.all(
        "select tool from conversation_allowances where conversation_id = ? and owner = ?", (conversation_id, owner)
    )


def _allow(sql: Sql, conversation_id: str, tools: Sequence[str], owner: str) -> None:
    for tool in tools:
        sql.execute(
            "insert into conversation_allowances (conversation_id, tool, owner) values (?, ?, ?)"
            " on conflict do nothing",
            (conversation_id, tool, owner),
        )


def _take(sql: Sql, conversation_id: str, holder: str, lease: float, owner: str) -> tuple[bool, str] | None:
    """(whether `holder` took the lease, the transcript); None: `owner` has no such conversation. A hold that ends
    after `LONGEST_HOLD` from now was not written by a turn (a clock that jumped, a hand edit): it would block the
    conversation for that long, so it is taken too."""
    now = time.time()
    taken = sql.execute(
        "update conversations set holder = ?, held_until = ? where id = ? and owner = ?"
        " and (holder is null or held_until is null or held_until < ? or held_until > ?)",
        (holder, now + lease, conversation_id, owner, now, now + LONGEST_HOLD),
    )
    messages = _select(sql, conversation_id, owner)
    return None if messages is None else (taken == 1, messages)


def _extend(sql: Sql, turn: Turn, lease: float) -> bool:
    return (
        sql.execute(
            "update conversations set held_until = ? where id = ? and holder = ?",
            (time.time() + lease, turn.conversation_id, turn.holder),
        )
        == 1
    )


def _let_go(sql: Sql, conversation_id: str, holder: str) -> None:
    sql.execute(
        "update conversations set holder = null, held_until = null where id = ? and holder = ?",
        (conversation_id, holder),
    )


@one_statement
def _insert(sql: Sql, conversation_id: str, body: str, owner: str) -> None:
    # a resumed durable run may save its new conversation again: the same transcript (never over another's)
    sql.execute(
        "insert into conversations (id, messages, updated, owner) values (?, ?, ?, ?) "
        "on conflict (id) do update set messages = excluded.messages, updated = excluded.updated"
        " where conversations.owner = excluded.owner",
        (conversation_id, body, now(), owner),
    )


@one_statement
def _update(sql: Sql, turn: Turn, body: str) -> bool:
    """Save the turn's transcript if it still holds the conversation, and let it go; whether it did."""
    return (
        sql.execute(
            "update conversations set messages = ?, updated = ?, holder = null, held_until = null "
            "where id = ? and holder = ?",
            (body, now(), turn.conversation_id, turn.holder),
        )
        == 1
    )
