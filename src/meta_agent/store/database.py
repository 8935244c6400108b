"""The database of meta-agent's shared state: embedded SQLite by default, PostgreSQL when `META_AGENT_DATABASE_URL`
names one (README, Replicas on PostgreSQL), behind one small seam, `Database.run(work, *args)`: `work(sql, *args)` in
one transaction, which the event loop awaits with `Database.call` (on the database's own thread: it never waits on the
database). Statements are written once, with `?` placeholders, for both.

The schema is a numbered list of migrations (`MIGRATIONS`); the version reached is the one row of `meta_agent_schema`,
and opening a database applies the ones it lacks, in one transaction that holds a lock, so replicas starting together
migrate it once. A database whose version is newer than this code knows is refused: this code would not know what
the newer columns mean.

psycopg is imported only when a PostgreSQL URL is given (about 135 ms).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio

from meta_agent.errors import ConfigError
from meta_agent.shared.text import first_line
from meta_agent.shared.urls import loggable_url

T = TypeVar("T")
W = TypeVar("W", bound=Callable[..., Any])
# An arbitrary key for PostgreSQL's advisory lock that serialises migrations across replicas.
MIGRATION_LOCK = 0x6D657461
# The database's time, in seconds since the epoch (SQLite 3.40 has no sub-second unixepoch: from the Julian day).
POSTGRES_CLOCK = "extract(epoch from clock_timestamp())::double precision"
SQLITE_CLOCK = "((julianday('now') - 2440587.5) * 86400.0)"
# The owner of what callers off HTTP make (stdio, in memory, `meta-agent run`, a program embedding the engine): the
# local user, who holds the database anyway; and of every row made before rows had owners.
LOCAL_OWNER = "local"
# Seconds a database's own thread waits for the next transaction before it ends (the next one starts it again).
LANE_IDLE_SECONDS = 10.0


class Contact:
    """Whether the database answers, as the latest transaction found it: connecting failed or the connection broke
    (out of touch), or one went through (in touch). Read without a query (the HTTP health route)."""

    def __init__(self) -> None:
        self.in_touch = True
        self.lost_once = False  # contact was lost at least once since this process started
        self._since = time.monotonic()  # when the current state began

    def reached(self) -> None:
        if not self.in_touch:
            self.in_touch, self._since = True, time.monotonic()

    def lost(self) -> None:
        if self.in_touch:
            self.in_touch, self.lost_once, self._since = False, True, time.monotonic()

    def steady_for(self, seconds: float) -> bool:
        """In touch, and for `seconds` at least since contact was last lost (never lost: since the start)."""
        return self.in_touch and (not self.lost_once or time.monotonic() - self._since >= seconds)


# The works `one_statement` marked.
_ALONE: set[Callable[..., Any]] = set()


def one_statement(work: W) -> W:
    """Mark `work` as making one statement, which is a transaction by itself: on PostgreSQL `run` sends it without a
    BEGIN and a COMMIT around it, two round trips fewer. A second statement would raise (RuntimeError) rather than
    go outside a transaction."""
    _ALONE.add(work)
    return work


class Sql:
    """The statements of one transaction, with `?` placeholders on either database. `clock` is an SQL expression of
    the database's own time in seconds since the epoch: replicas whose clocks disagree agree on it. `statements`:
    how many it may make (None: any number)."""

    def __init__(self, cursor: Any, *, postgres: bool, statements: int | None = None) -> None:
        self._cursor = cursor
        self.postgres = postgres
        self.clock = POSTGRES_CLOCK if postgres else SQLITE_CLOCK
        self._left = statements

    def execute(self, statement: str, params: Sequence[Any] = ()) -> int:
        """Run `statement`; how many rows it changed."""
        if self._left is not None:
            if self._left == 0:
                raise RuntimeError("a work marked one_statement made a second statement")
            self._left -= 1
        self._cursor.execute(statement.replace("?", "%s") if self.postgres else statement, tuple(params))
        return int(self._cursor.rowcount)

    def one(self, statement: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        """The first row `statement` reads, or None."""
        self.execute(statement, params)
        row = self._cursor.fetchone()
        return None if row is None else tuple(row)

    def all(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self.execute(statement, params)
        return [tuple(row) for row in self._cursor.fetchall()]


def _conversations(sql: Sql) -> None:
    """1: conversations with their holds. An SQLite store made before migrations were numbered has the table,
    maybe without the hold's columns."""
    sql.execute(
        "create table if not exists conversations (id text primary key, messages text not null, updated text not null,"
        f" holder text, held_until {'double precision' if sql.postgres else 'real'})"
    )
    if not sql.postgres:
        have = {row[1] for row in sql.all("pragma table_info(conversations)")}
        for name, declaration in (("holder", "text"), ("held_until", "real")):
            if name not in have:
                sql.execute(f"alter table conversations add column {name} {declaration}")


def _runs(sql: Sql) -> None:
    """2: the run index (meta_agent.store.run_index)."""
    sql.execute(
        "create table runs (id text primary key, status text not null, mode text not null, replica text not null,"
        f" started text not null, updated text not null, alive_until {'double precision' if sql.postgres else 'real'},"
        " result text, error text)"
    )


def _shared(sql: Sql) -> None:
    """3: what replicas share beyond conversations: the rounds of parked runs, the key that seals their request
    states (meta_agent.store.parking), the tools allowed for the rest of a conversation; and each run's task in
    the run index, which `meta-agent runs` lists."""
    real = "double precision" if sql.postgres else "real"
    sql.execute(
        "create table parked_rounds (id text primary key, replica text not null, run_id text,"
        " asked integer not null, outcome text, final integer not null default 0, answered_by text, answer text,"
        f" alive_until {real})"
    )
    sql.execute("create table meta_agent_secrets (name text primary key, value text not null)")
    sql.execute(
        "create table conversation_allowances (conversation_id text not null, tool text not null,"
        " primary key (conversation_id, tool))"
    )
    sql.execute("alter table runs add column task text")


def _resumptions(sql: Sql) -> None:
    """4: how often each run was handed on after its replica stopped, and the step it was last in, so that a run
    that takes every replica down with it is given up (meta_agent.durable.runs)."""
    sql.execute("alter table runs add column resumes integer not null default 0")
    sql.execute("alter table runs add column doing text")


def _tasks(sql: Sql) -> None:
    """5: MCP tasks: each one's owner and how long it is kept (meta_agent.store.tasks)."""
    real = "double precision" if sql.postgres else "real"
    sql.execute(
        "create table tasks (id text primary key, owner text not null, tool text not null, created text not null,"
        f" created_at {real} not null, ttl_ms bigint not null, cancelled integer not null default 0)"
    )
    sql.execute("create index tasks_by_owner on tasks (owner, id)")


def _owners(sql: Sql) -> None:
    """6: whose each conversation, run, tool allowed for the rest of a conversation and parked round is: the subject
    of the caller that made it (meta_agent.front.auth.subjects), an opaque string; the rows made before are the local
    user's."""
    for table in ("conversations", "runs", "conversation_allowances", "parked_rounds"):
        sql.execute(f"alter table {table} add column owner text not null default '{LOCAL_OWNER}'")
    sql.execute("create index runs_by_owner on runs (owner, started)")


def _faces(sql: Sql) -> None:
    """7: what the apps and the console read and write: each run's events as its view shows them
    (meta_agent.store.run_events), the call that started a run (`call_key`: the caller's connection and the JSON-RPC
    id of its `tools/call`, which is all a host's app knows of it), the approvals a view may answer
    (meta_agent.store.app_questions), and each subject's tool toggles, trust levels and mode
    (meta_agent.store.preferences)."""
    sql.execute(
        "create table run_events (run_id text not null, seq integer not null, body text not null,"
        " primary key (run_id, seq))"
    )
    sql.execute("alter table runs add column call_key text")
    sql.execute("create index runs_by_call on runs (call_key)")
    sql.execute(
        "create table app_questions (run_id text not null, key text not null, owner text not null, step integer not"
        " null, name text not null, arguments text not null, answer text, allowed integer,"
        " primary key (run_id, key))"
    )
    sql.execute(
        "create table tool_preferences (owner text not null, tool text not null, enabled integer, trust text,"
        " primary key (owner, tool))"
    )
    sql.execute("create table owner_preferences (owner text primary key, mode text)")


def _result_images(sql: Sql) -> None:
    """8: the images of each finished run's result, which the run index's JSON does not hold, so that its result read
    through any replica (or after a restart) carries them (meta_agent.store.result_images); and how many images its
    result does not carry (left out by the bounds of a result, or dropped since with the run's views)."""
    sql.execute(
        "create table run_images (run_id text not null, seq integer not null, mime_type text not null,"
        " data text not null, primary key (run_id, seq))"
    )
    sql.execute("alter table runs add column images_left_out integer not null default 0")


MIGRATIONS: tuple[Callable[[Sql], None], ...] = (
    _conversations,
    _runs,
    _shared,
    _resumptions,
    _tasks,
    _owners,
    _faces,
    _result_images,
)


class Database:
    """One connection, used one transaction at a time: by `run` on the caller's thread, and by `call` on the
    database's own thread, which takes the event loop's transactions in turn."""

    errors: tuple[type[Exception], ...]  # what a failing database raises

    def __init__(self, label: str, *, postgres: bool) -> None:
        self.label = label  # names the database in errors: its path, or its URL without user info or query
        self.postgres = postgres
        self.contact = Contact()
        self._connection: Any = None
        self._lock = threading.Lock()
        self._calls: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        self._lane: threading.Thread | None = None  # the database's own thread, while it has work
        self._lane_lock = threading.Lock()

    async def call(self, work: Callable[..., T], *args: Any) -> T:
        """`run(work, *args)` on the database's own thread, awaited: the event loop goes on meanwhile.

        The one connection takes one transaction at a time whatever the number of threads; so one thread takes them
        in turn, in the order they came, each handed over once (a worker thread each cost twice the CPU under load,
        contending for the connection's lock). As with `run` on a worker thread, a transaction once handed in is
        waited for to its end, by a caller cancelled meanwhile too.

        Raises:
            As `run`.
        """
        loop = asyncio.get_running_loop()
        done: asyncio.Future[T] = loop.create_future()
        self._calls.put((partial(contextvars.copy_context().run, self.run, work, *args), loop, done))
        with self._lane_lock:
            if self._lane is None:
                self._lane = threading.Thread(target=self._take_calls, name="meta-agent-database", daemon=True)
                self._lane.start()
        with anyio.CancelScope(shield=True):
            await asyncio.wait((done,))
        return done.result()

    def _take_calls(self) -> None:
        """The database's own thread: each transaction handed to `call`, in turn, until none has come for
        LANE_IDLE_SECONDS."""
        while True:
            try:
                job, loop, done = self._calls.get(timeout=LANE_IDLE_SECONDS)
            except queue.Empty:
                with self._lane_lock:  # one handed in meanwhile finds this thread still here, or none
                    if self._calls.empty():
                        self._lane = None
                        return
                continue
            try:
                settle = partial(_settle, done, job(), None)
            except BaseException as exc:  # the caller's, whatever it is: it must not wait for ever
                settle = partial(_settle, done, None, exc)
            with contextlib.suppress(RuntimeError):  # the caller's event loop has closed: nobody waits for it
                loop.call_soon_threadsafe(settle)

    def run(self, work: Callable[..., T], *args: Any) -> T:
        """`work(sql, *args)` in one transaction, on the caller's thread (the event loop awaits `call` instead); the
        schema is brought up to date first.

        Raises:
            ConfigError: the database's schema is newer than this code knows.
            self.errors: the database cannot be reached, read or written.
        """
        with self._lock:
            if self._connection is None:
                try:
                    connection = self._connect()
                except self.errors:
                    self.contact.lost()
                    raise
                try:
                    self._transaction(connection, self._migrate)
                except BaseException:
                    connection.close()
                    raise
                self._connection = connection
            try:
                result = self._transaction(self._connection, work, *args)
            except self.errors:
                if self._broken(self._connection):  # the next call connects again (a restarted server, say)
                    self._connection.close()
                    self._connection = None
                    self.contact.lost()
                raise
            self.contact.reached()
            return result

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def _migrate(self, sql: Sql) -> None:
        if self.postgres:  # replicas starting together: one migrates, the others wait for it, then find it done
            sql.execute("select pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))
        sql.execute("create table if not exists meta_agent_schema (version integer not null)")
        row = sql.one("select version from meta_agent_schema")
        version = 0 if row is None else int(row[0])
        if version > len(MIGRATIONS):
            raise ConfigError(
                f"{self.label}: the database's schema is version {version}, newer than this meta-agent knows "
                f"({len(MIGRATIONS)}): upgrade meta-agent, or give it another database"
            )
        for migration in MIGRATIONS[version:]:
            migration(sql)
        if row is None:
            sql.execute("insert into meta_agent_schema (version) values (?)", (len(MIGRATIONS),))
        elif version < len(MIGRATIONS):
            sql.execute("update meta_agent_schema set version = ?", (len(MIGRATIONS),))

    def _connect(self) -> Any:
        raise NotImplementedError

    def _broken(self, connection: Any) -> bool:
        return False

    def _transaction(self, connection: Any, work: Callable[..., T], *args: Any) -> T:
        raise NotImplementedError


class SqliteDatabase(Database):
    """A file, in write-ahead-log mode: a save is one append, and other processes on the same file read meanwhile."""

    errors = (sqlite3.Error, OSError)

    def __init__(self, path: Path) -> None:
        super().__init__(str(path), postgres=False)
        self.path = path

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(self.path, timeout=10, check_same_thread=False, isolation_level=None)
        try:
            connection.execute("pragma journal_mode=wal")
            connection.execute("pragma synchronous=normal")
            # KiB: lookups are by key, so the 2 MiB default cache would only add to resident memory
            connection.execute("pragma cache_size=-256")
        except BaseException:
            connection.close()
            raise
        return connection

    def _transaction(self, connection: sqlite3.Connection, work: Callable[..., T], *args: Any) -> T:
        # immediate: a transaction that will write takes the write lock first, so two processes migrating or
        # taking a hold at once queue (for the connection's timeout) instead of failing on a lock upgrade
        connection.execute("begin immediate")
        try:
            # (one_statement: still in a transaction here, which costs no round trip; held to one statement alike)
            result = work(Sql(connection.cursor(), postgres=False, statements=1 if work in _ALONE else None), *args)
        except BaseException:
            connection.execute("rollback")
            raise
        connection.execute("commit")
        return result


class PostgresDatabase(Database):
    def __init__(self, url: str) -> None:
        super().__init__(loggable_url(url), postgres=True)
        import psycopg  # on first use: only a PostgreSQL store needs it

        self.errors = (psycopg.Error, OSError)
        self.url = url

    def _connect(self) -> Any:
        import psycopg

        # autocommit: each `transaction()` block below is the whole transaction, committed when it ends
        return psycopg.connect(self.url, autocommit=True, connect_timeout=10)

    def _broken(self, connection: Any) -> bool:
        return bool(connection.broken or connection.closed)

    def _transaction(self, connection: Any, work: Callable[..., T], *args: Any) -> T:
        if work in _ALONE:  # the connection commits each statement it is sent outside a transaction
            with connection.cursor() as cursor:
                return work(Sql(cursor, postgres=True, statements=1), *args)
        with connection.transaction(), connection.cursor() as cursor:
            return work(Sql(cursor, postgres=True), *args)


_Call = tuple[Callable[[], Any], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


def _settle(done: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if done.done():  # (never cancelled while awaited, shielded: a loop torn down may have)
        return
    if error is not None:
        done.set_exception(error)
    else:
        done.set_result(result)


def now() -> str:
    """UTC now, as the rows' time columns hold it (SQLite's datetime('now') format, which older stores hold)."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())


def open_database(url: str | None, path: Path) -> Database:
    """PostgreSQL at `url` (META_AGENT_DATABASE_URL), else SQLite at `path`. Nothing is connected until the first
    `run`."""
    return PostgresDatabase(url) if url else SqliteDatabase(path)


def check(url: str) -> None:
    """Connect to the PostgreSQL database at `url` and bring its schema up to date: what a replica does before it
    serves, so that one that cannot use its database says so instead of starting.

    Raises:
        ConfigError: it cannot be reached, or its schema is newer than this code knows; one line naming it.
    """
    database = PostgresDatabase(url)
    try:
        database.run(lambda sql: None)
    except database.errors as exc:
        raise ConfigError(f"META_AGENT_DATABASE_URL: cannot use {database.label}: {first_line(str(exc))}") from None
    finally:
        database.close()
