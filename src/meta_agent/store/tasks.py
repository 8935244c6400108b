"""The task rows: which caller owns each MCP task (a run started by a task-augmented call) and how long it is kept,
so that any replica sharing the database can say how a task is to the caller that made it, and to nobody else
(meta_agent.front.tasks.board).

A task's id is its run's id; its status and result are the run's, from the run index (meta_agent.store.run_index).
A row is kept `ttl_ms` from its creation, and while its run is running; then it is gone, as if it never was.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from meta_agent.store import result_images
from meta_agent.store.database import Database, Sql, now
from meta_agent.store.run_index import RunState, columns, state

# Tasks per page of `tasks/list`.
PAGE = 50


@dataclass(frozen=True, kw_only=True)
class TaskRow:
    """A task as the database holds it: its row, and its run's state (None until the run has started)."""

    task_id: str
    created: str
    ttl_ms: int
    age: float  # seconds since it was made, by the database's clock
    cancelled: bool  # a cancel was asked for, through any replica: the task reads cancelled however its run ends
    run: RunState | None


class TaskRows:
    """The `tasks` table, read and written on worker threads (`Database.run`)."""

    def __init__(self, database: Database) -> None:
        self.database = database

    async def create(self, task_id: str, owner: str, tool: str, ttl_ms: int) -> None:
        """A new task, owned by `owner`.

        Raises:
            self.database.errors: the database cannot be written.
        """
        await self.database.call(_create, task_id, owner, tool, ttl_ms)

    async def read(self, task_id: str, owner: str, *, images: bool = False) -> TaskRow | None:
        """The task, if `owner` owns it and it is kept still; else None, whichever of these it is. `images`: its
        run's result with its images, once the run is done (meta_agent.store.result_images).

        Raises:
            self.database.errors: the database cannot be read.
        """
        return await self.database.call(_read, task_id, owner, images)

    async def owned(self, task_id: str) -> tuple[str, TaskRow] | None:
        """The task `task_id` and whose it is (None: no task has that id, or it is no longer kept): for a run this
        replica resumed, which may be a task's; never for a caller's request, which reads only its own (`read`).

        Raises:
            self.database.errors: the database cannot be read.
        """
        return await self.database.call(_owned, task_id)

    async def page(self, owner: str, after: str | None) -> tuple[list[TaskRow], str | None]:
        """`owner`'s tasks, oldest first, from the one after `after`; and the cursor of the next page (None: last).

        Raises:
            self.database.errors: the database cannot be read.
        """
        return await self.database.call(_page, owner, after)

    async def cancel(self, task_id: str) -> None:
        """Mark the task cancelled.

        Raises:
            self.database.errors: the database cannot be written.
        """
        await self.database.call(_cancel, task_id)

    async def forget_expired(self) -> int:
        """Drop the tasks past their time whose runs are not running; how many.

        Raises:
            self.database.errors: the database cannot be written.
        """
        return await self.database.call(_forget_expired)


def _create(sql: Sql, task_id: str, owner: str, tool: str, ttl_ms: int) -> None:
    sql.execute(
        f"insert into tasks (id, owner, tool, created, created_at, ttl_ms) values (?, ?, ?, ?, {sql.clock}, ?)",
        (task_id, owner, tool, now(), ttl_ms),
    )


def _ended_at(sql: Sql, run: str = "r") -> str:
    """When the run was last written (its end, once it has ended), in seconds since the epoch."""
    if sql.postgres:
        return f"extract(epoch from cast({run}.updated as timestamp))"
    return f"((julianday({run}.updated) - 2440587.5) * 86400.0)"


def _kept(sql: Sql) -> str:
    """The condition on a row joined to its run (`t`, `r`) that the task is kept: within its time from its creation
    or from its run's end, or running."""
    return (
        f"(t.created_at + t.ttl_ms / 1000.0 >= {sql.clock} or r.status = 'running'"
        f" or {_ended_at(sql)} + t.ttl_ms / 1000.0 >= {sql.clock})"
    )


def _select(sql: Sql) -> str:
    return (
        f"select t.id, t.created, t.ttl_ms, t.cancelled, {sql.clock} - t.created_at, r.id, {columns(sql, 'r')}"
        " from tasks t left join runs r on r.id = t.id"
    )


def _row(row: tuple[Any, ...]) -> TaskRow:
    task_id, created, ttl_ms, cancelled, age, run_id, *run = row
    return TaskRow(
        task_id=str(task_id),
        created=str(created),
        ttl_ms=int(ttl_ms),
        cancelled=bool(cancelled),
        age=float(age),
        run=None if run_id is None else state(str(run_id), tuple(run)),
    )


def _read(sql: Sql, task_id: str, owner: str, images: bool = False) -> TaskRow | None:
    row = sql.one(f"{_select(sql)} where t.id = ? and t.owner = ? and {_kept(sql)}", (task_id, owner))
    if row is None:
        return None
    task = _row(row)
    if images and task.run is not None and task.run.status == "done":
        return replace(task, run=replace(task.run, images=result_images.read(sql, task.task_id)))
    return task


def _owned(sql: Sql, task_id: str) -> tuple[str, TaskRow] | None:
    row = sql.one("select owner from tasks where id = ?", (task_id,))
    task = None if row is None else _read(sql, task_id, str(row[0]))
    return None if row is None or task is None else (str(row[0]), task)


def _page(sql: Sql, owner: str, after: str | None) -> tuple[list[TaskRow], str | None]:
    rows = sql.all(
        f"{_select(sql)} where t.owner = ? and t.id > ? and {_kept(sql)} order by t.id limit ?",
        (owner, after or "", PAGE + 1),
    )
    tasks = [_row(row) for row in rows[:PAGE]]
    return tasks, (tasks[-1].task_id if len(rows) > PAGE else None)


def _cancel(sql: Sql, task_id: str) -> None:
    sql.execute("update tasks set cancelled = 1 where id = ?", (task_id,))


def _forget_expired(sql: Sql) -> int:
    return sql.execute(
        f"delete from tasks where created_at + ttl_ms / 1000.0 < {sql.clock}"
        " and not exists (select 1 from runs r where r.id = tasks.id"
        f" and (r.status = 'running' or {_ended_at(sql)} + tasks.ttl_ms / 1000.0 >= {sql.clock}))"
    )


def task_cancelled(sql: Sql, task_id: str) -> bool:
    """Whether the run `task_id` is a task's whose cancellation was asked for (through any replica)."""
    return sql.one("select 1 from tasks where id = ? and cancelled = 1", (task_id,)) is not None
