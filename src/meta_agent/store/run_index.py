"""The run index: every run's status in the database, so any replica can say how a run is and give its result
(the resource `meta-agent://runs/{run_id}`), even to a caller whose connection died with the replica that ran it.

A running run's row is kept alive by its replica (`alive_until`, renewed while it runs, like a conversation's
hold); a row still `running` whose replica stopped renewing it is `interrupted`: its replica died or was stopped
mid-run. Marks are set and compared in the database's own time, so a replica whose clock is off neither lapses a run
nor keeps one alive.

Through a database outage nobody can renew: marks lapse that nobody gave up. So an owner retries a failed renewal
promptly (RETRY_SECONDS), and a replica that lost touch with the database takes no lapsed run until it has been in
touch again for a whole mark's span, time for every owner to have renewed; what lapsed by then was given up.

A run is also its caller's: each row holds the subject that started it (`owner`, meta_agent.front.auth.subjects), kept
when another replica resumes the run, and a run is read, or listed, for its owner only.

A finished run's result is its structured result (JSON) in its row, and the images of its result beside it
(meta_agent.store.result_images), read only where a reader asks for them (`read(..., images=True)`): a listing never
carries them.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

import anyio
import structlog

from meta_agent.core.messages import ImagePart
from meta_agent.core.result import RunResult
from meta_agent.errors import MetaAgentError, leaf, summary
from meta_agent.shared.text import one_line
from meta_agent.store import result_images
from meta_agent.store.database import LOCAL_OWNER, Database, Sql, now, one_statement

log = structlog.get_logger(__name__)

# A running run's row stays alive this long past its last renewal; renewed three times as often.
ALIVE_SECONDS = 30.0
# A renewal that failed (the database unreachable) is tried again this soon, at most: once the database is back, an
# owner's mark must be renewed well within the span other replicas wait before taking lapsed runs.
RETRY_SECONDS = 1.0
RunStatus = Literal["running", "interrupted", "done"]
# Why a durable run ended that an upgrade left to nobody: recorded in another durable-run format (durable/format.py),
# with no replica of that format left to finish it. What its task and `meta-agent runs` say.
NOT_RESUMABLE = "interrupted by an upgrade that cannot resume it; run it again"
# Set once this process is stopping (a signal): its runs, cancelled by that, are interrupted, not done.
_stopping = False


def process_stopping() -> None:
    """This process is stopping: a run cancelled from now on is left `interrupted` (its mark dropped at once), for
    another replica to finish where runs are durable, instead of `done` as cancelled by its caller."""
    global _stopping
    _stopping = True


def stopping() -> bool:
    return _stopping


@dataclass(frozen=True, kw_only=True)
class RunState:
    run_id: str
    status: RunStatus
    mode: str
    task: str
    replica: str
    started: str
    updated: str
    result: dict[str, Any] | None  # the structured result, when done
    error: str | None  # why a run that is done has no result: it failed or was cancelled
    owner: str = LOCAL_OWNER  # the subject whose run it is
    images: tuple[ImagePart, ...] = ()  # its result's images, where they were read (`RunIndex.read`)
    images_left_out: int = 0  # images of its run its result does not carry (meta_agent.store.result_images)

    def to_json(self) -> dict[str, Any]:
        """How the run is (the resource meta-agent://runs/{run_id}); its images are not in it."""
        left_out = {"images_left_out": self.images_left_out} if self.images_left_out else {}
        return {
            "run_id": self.run_id,
            "status": self.status,
            "mode": self.mode,
            "started": self.started,
            "result": self.result,
            "error": self.error,
            **left_out,
        }


class RunIndex:
    def __init__(self, database: Database, replica: str, *, alive_seconds: float = ALIVE_SECONDS) -> None:
        """`replica`: this process's name in the rows it writes."""
        self.database = database
        self.replica = replica
        self.alive_seconds = alive_seconds
        self._left: set[str] = set()  # runs to leave `interrupted` when cancelled (`leave`)

    def leave(self, run_id: str) -> None:
        """The run `run_id`, cancelled from now on, is left `interrupted` (its mark dropped at once) for another
        replica to finish, as every run is once the process is stopping: a resumed run whose engine stops."""
        self._left.add(run_id)

    @asynccontextmanager
    async def running(
        self, run_id: str, mode: str, task: str = "", *, owner: str = LOCAL_OWNER, call_key: str | None = None
    ) -> AsyncIterator[None]:
        """`owner`'s run is `running` while this is entered, its row renewed meanwhile; one that leaves by an
        exception (a failure, a cancelled call) is `done` with that error. The index failing does not fail the run:
        it is logged, and the run goes on. A run resumed here keeps the owner (and the `call_key`) its row has."""
        await self._write(_start, run_id, mode, task, self.replica, self.alive_seconds, owner, call_key)
        failure: Exception | None = None
        async with anyio.create_task_group() as renewals:
            renewals.start_soon(self._renew, run_id)
            try:
                yield
            except anyio.get_cancelled_exc_class():  # a caller that went away: cancellation goes on as it came
                with anyio.CancelScope(shield=True):
                    if _stopping or run_id in self._left:
                        await self._write(_alive, run_id, self.replica, None)
                    else:
                        await self._write(_finish, run_id, self.replica, None, "cancelled")
                raise
            except Exception as exc:  # raised below as it came, not wrapped in this task group's exception group
                failure = exc
            finally:
                renewals.cancel_scope.cancel()
                self._left.discard(run_id)
        if failure is not None:  # (a KeyboardInterrupt goes through: the run reads `interrupted` once its mark lapses)
            with anyio.CancelScope(shield=True):
                await self._write(_finish, run_id, self.replica, None, _why(leaf(failure)))
            raise failure

    async def finished(self, run_id: str, result: RunResult) -> None:
        """The run is done with `result`: its structured result, and its images beside it, in one transaction."""
        await self._write(
            _finish, run_id, self.replica, json.dumps(result.to_json()), None, result.images, result.images_left_out
        )

    async def given_up(self, run_id: str, why: str) -> None:
        """The run is done without a result: it will not be finished (`why`, one line)."""
        await self._write(_finish, run_id, None, None, why)

    async def doing(self, run_id: str, step: str) -> None:
        """The run is in `step` now (`step 4 (kid.big)`): what a run given up says it was in."""
        await self._write(_doing, run_id, self.replica, step)

    async def resumed(self, run_id: str) -> tuple[int, str | None]:
        """Count one more resumption of the run: how many there have been now, and the step it was last in.

        Raises:
            self.database.errors: the database cannot be reached.
        """
        return await self.database.call(_resumed, run_id)

    async def take_lapsed(self) -> list[tuple[str, str]]:
        """The runs still `running` whose mark lapsed (their replica stopped), each with the replica that ran it;
        marked alive again, so that a run is taken by one replica only (it is its to hand on). The row keeps naming
        the replica that ran it until another runs it. None while this replica has been back in touch with the
        database for less than a mark's span (the look only touches it then): its owners may not have renewed yet.

        Raises:
            self.database.errors: the database cannot be reached.
        """
        if not self.database.contact.steady_for(self.alive_seconds):
            await self.database.call(_touch)
            return []
        return await self.database.call(_take_lapsed, self.alive_seconds)

    async def read(self, run_id: str, *, owner: str | None = LOCAL_OWNER, images: bool = False) -> RunState | None:
        """The run's state, with its result's images where `images` asks for them (a run that is done); None: `owner`
        has no run with that id here (None: whoever's it is)."""
        return await self.database.call(read_state, run_id, owner, images)

    async def by_call(self, call_key: str, task: str | None, *, owner: str) -> RunState | None:
        """`owner`'s newest run started by the call `call_key` (its connection and JSON-RPC id) whose task begins with
        `task` where given (a connection may use an id again; the task tells two runs apart): how a host's app, which
        knows only the call, finds its run.

        Raises:
            self.database.errors: the database cannot be read.
        """
        rows = await self.database.call(_by_call, call_key, owner)
        found = [state(str(row[0]), row[1:]) for row in rows]
        return next((run for run in found if task is None or run.task.startswith(task)), None)

    async def recent(self, limit: int = 20, *, owner: str | None = LOCAL_OWNER) -> list[RunState]:
        """`owner`'s newest `limit` runs (None: anyone's), newest first, whichever replica ran them.

        Raises:
            self.database.errors: the database cannot be reached.
        """
        rows = await self.database.call(_recent, limit, owner)
        return [state(str(row[0]), row[1:]) for row in rows]

    async def others_among_newest(self, limit: int = 20, *, owner: str) -> int:
        """How many of the newest `limit` runs of anyone's are not `owner`'s: those `recent(limit, owner=None)` lists
        and `recent(limit, owner=owner)` leaves out. As cheap as that listing: it reads the same rows.

        Raises:
            self.database.errors: the database cannot be reached.
        """
        row = await self.database.call(_others_among_newest, limit, owner)
        return int(row[0]) if row else 0

    async def _renew(self, run_id: str) -> None:
        """Renew the run's mark every third of its span; one that failed, every RETRY_SECONDS until one goes through
        (said once when it fails, once when it is renewed again)."""
        failing = False
        while True:
            await anyio.sleep(min(RETRY_SECONDS, self.alive_seconds / 3) if failing else self.alive_seconds / 3)
            try:
                await self.database.call(_alive, run_id, self.replica, self.alive_seconds)
            except self.database.errors as exc:
                if not failing:
                    log.warning(
                        "run_not_renewed", run_id=run_id, error=one_line(str(exc)), database=self.database.label
                    )
                failing = True
                continue
            if failing:
                log.info("run_renewed", run_id=run_id)
            failing = False

    async def _write(self, work: Any, *args: Any) -> None:
        try:
            await self.database.call(work, *args)
        except self.database.errors as exc:
            log.warning("run_index_not_written", error=one_line(str(exc)), database=self.database.label)


def _why(exc: BaseException) -> str:
    """Why a run ended with `exc`, in one line: what our own errors say, the type and gist of anything else."""
    return one_line(str(exc)) if isinstance(exc, MetaAgentError) else summary(exc)


@one_statement
def _start(
    sql: Sql,
    run_id: str,
    mode: str,
    task: str,
    replica: str,
    alive_seconds: float,
    owner: str,
    call_key: str | None,
) -> None:
    """A new run, or a run resumed on `replica` (its row is taken over; its owner and call stay)."""
    at = now()
    sql.execute(
        "insert into runs (id, status, mode, task, replica, started, updated, alive_until, owner, call_key)"
        f" values (?, ?, ?, ?, ?, ?, ?, {sql.clock} + ?, ?, ?) on conflict (id) do update set status = 'running',"
        " replica = excluded.replica, updated = excluded.updated, alive_until = excluded.alive_until",
        (run_id, "running", mode, task, replica, at, at, alive_seconds, owner, call_key),
    )


def _touch(sql: Sql) -> None:
    sql.one("select 1")


def _take_lapsed(sql: Sql, alive_seconds: float) -> list[tuple[str, str]]:
    # Locked as read: of two replicas taking at once, the second skips what the first took (SQLite: one writer).
    lock = " for update skip locked" if sql.postgres else ""
    rows = sql.all(
        "select id, replica from runs where status = 'running'"
        f" and (alive_until is null or alive_until < {sql.clock}){lock}"
    )
    for run_id, _ in rows:
        sql.execute(
            f"update runs set alive_until = {sql.clock} + ?, updated = ? where id = ?", (alive_seconds, now(), run_id)
        )
    return [(str(run_id), str(replica)) for run_id, replica in rows]


# The writes of the replica running a run name it (`replica`): one that lost the run (it stalled past its mark, and
# another replica took the run over) cannot renew, leave or end it under the one running it now.


@one_statement
def _alive(sql: Sql, run_id: str, replica: str, alive_seconds: float | None) -> None:
    """The run's mark, `alive_seconds` from now; None: lapsed at once (a run left for another replica)."""
    until = "0" if alive_seconds is None else f"{sql.clock} + ?"
    sql.execute(
        f"update runs set alive_until = {until} where id = ? and status = 'running' and replica = ?",
        (*(() if alive_seconds is None else (alive_seconds,)), run_id, replica),
    )


@one_statement
def _doing(sql: Sql, run_id: str, replica: str, step: str) -> None:
    sql.execute(
        "update runs set doing = ? where id = ? and status = 'running' and replica = ?", (step, run_id, replica)
    )


def _resumed(sql: Sql, run_id: str) -> tuple[int, str | None]:
    sql.execute("update runs set resumes = resumes + 1 where id = ?", (run_id,))
    row = sql.one("select resumes, doing from runs where id = ?", (run_id,))
    return (0, None) if row is None else (int(row[0]), row[1])


def _finish(
    sql: Sql,
    run_id: str,
    replica: str | None,
    result: str | None,
    error: str | None,
    images: Sequence[ImagePart] = (),
    images_left_out: int = 0,
) -> None:
    """The run is done, its result's images kept with it; `replica` None: whoever runs it (a run given up by the
    replica that took it)."""
    mine = "" if replica is None else " and replica = ?"
    done = sql.execute(
        "update runs set status = 'done', result = ?, error = ?, updated = ?, alive_until = null,"
        f" images_left_out = ? where id = ?{mine}",
        (result, error, now(), images_left_out, run_id, *(() if replica is None else (replica,))),
    )
    if done:  # not by a replica that lost the run: the one running it now finishes it
        result_images.keep(sql, run_id, images)


def columns(sql: Sql, table: str = "") -> str:
    """The columns `state` reads (of `table`, where the statement joins others); whether the mark lapsed in the
    database's time."""
    t = f"{table}." if table else ""
    lapsed = f"case when {t}alive_until is null or {t}alive_until < {sql.clock} then 1 else 0 end"
    return (
        f"{t}status, {t}mode, {t}task, {t}replica, {t}started, {t}updated, {lapsed}, {t}result, {t}error, {t}owner,"
        f" {t}images_left_out"
    )


def read_state(sql: Sql, run_id: str, owner: str | None, images: bool) -> RunState | None:
    """The run's state, read for `owner` (None: whoever's it is), with its result's images where `images` asks."""
    if owner is None:
        row = sql.one(f"select {columns(sql)} from runs where id = ?", (run_id,))
    else:
        row = sql.one(f"select {columns(sql)} from runs where id = ? and owner = ?", (run_id, owner))
    if row is None:
        return None
    found = state(run_id, row)
    if images and found.status == "done":
        return dataclasses.replace(found, images=result_images.read(sql, run_id))
    return found


def _by_call(sql: Sql, call_key: str, owner: str) -> list[tuple[Any, ...]]:
    return sql.all(
        f"select id, {columns(sql)} from runs where call_key = ? and owner = ? order by started desc, id desc limit 5",
        (call_key, owner),
    )


def _recent(sql: Sql, limit: int, owner: str | None) -> list[tuple[Any, ...]]:
    mine, args = ("", (limit,)) if owner is None else (" where owner = ?", (owner, limit))
    return sql.all(f"select id, {columns(sql)} from runs{mine} order by started desc, id desc limit ?", args)


def _others_among_newest(sql: Sql, limit: int, owner: str) -> tuple[Any, ...] | None:
    newest = "select owner from runs order by started desc, id desc limit ?"
    return sql.one(f"select count(*) from ({newest}) as newest where owner <> ?", (limit, owner))


def state(run_id: str, row: tuple[Any, ...]) -> RunState:
    status, mode, task, replica, started, updated, lapsed, result, error, owner, images_left_out = row
    if status == "running" and lapsed:
        status = "interrupted"
    return RunState(
        run_id=run_id,
        status=status,
        mode=mode,
        task=task or "",
        replica=replica,
        started=started,
        updated=updated,
        result=None if result is None else json.loads(result),
        error=error,
        owner=str(owner),
        images_left_out=int(images_left_out or 0),
    )
