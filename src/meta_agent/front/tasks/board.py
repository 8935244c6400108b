"""MCP tasks (README, Tasks): a call of `agent` or `plan` answered at once with a task, whose run goes on in the
background while its caller reads how it is, answers its questions, reads its result or cancels it. The shapes of
each protocol era are meta_agent.front.tasks.protocol's; this module is the same for both.

A task's id is its run's id. Its run is a detached parked run (meta_agent.front.approvals.parked): its questions
(approvals, and its children's questions) wait one at a time, numbered, for an answer, bounded as every parked run is
(META_AGENT_MAX_PARKED, PARK_TIMEOUT), and holding no file descriptor meanwhile. At most META_AGENT_MAX_TASKS
tasks run at once per process. Whoever made a task owns it (its subject, meta_agent.front.auth.subjects): anyone else
presenting its id is told what an unknown id gets. The task rows (meta_agent.store.tasks) with the run index say how
a task is on every replica of a shared database; on PostgreSQL a task's questions and cancellation reach its replica
through the parked rounds, and a task whose replica died is finished by another (its run is durable). A task is kept
`ttl` from its creation (at most META_AGENT_TASK_TTL) and while it runs.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from functools import cache, partial
from typing import Any, Literal

import anyio
import mcp.types as t
import structlog
from pydantic import TypeAdapter, ValidationError

from meta_agent.core import events as ev
from meta_agent.front.approvals.parked import CallerRequest, ParkedRun, ParkingSpaces, Question
from meta_agent.front.progress import progress_message
from meta_agent.front.tool_results import stored_result, tool_error
from meta_agent.shared.ids import random_ulid
from meta_agent.store.database import now
from meta_agent.store.parking import Note, SharedRounds
from meta_agent.store.run_events import RunEvents
from meta_agent.store.run_index import NOT_RESUMABLE
from meta_agent.store.tasks import TaskRow, TaskRows

log = structlog.get_logger(__name__)

TASK_TOOLS = frozenset({"agent", "plan"})
POLL_SECONDS = 1.0  # how often a caller is told to look again, and a wait for another replica's task looks
MIN_TTL_MS = 60_000  # a result is kept at least this long, whatever ttl the caller asked for (0 included)
START_GRACE = 60.0  # a task whose run has not started this long after it was made: its replica stopped first
SWEEP_SECONDS = 60.0  # how often the tasks past their time are dropped
# Results of ended tasks kept in memory as their calls returned them, for what the run index holds no result of (a
# task refused before its run began, a run that failed): a finished run's result, with its images, is read from the
# index, here as on every replica.
KEEP_RESULTS = 100
MESSAGE_CHARS = 500  # a status message is a progress line, cut to this
STARTING = "starting its run"
RESUMED = "its run resumed on this replica after its own stopped"

Status = Literal["working", "input_required", "done", "cancelled", "lost"]


@dataclass(frozen=True, kw_only=True)
class TaskView:
    """How a task is, the same in both eras: `done` (its result, which may be a tool error), `lost` (it ended without
    one; `message` says why), `cancelled`, or still `working` or asking `questions` (`input_required`), each under a
    key no other question of the task has."""

    task_id: str
    status: Status
    message: str | None
    created: str
    updated: str
    ttl_ms: int
    result: t.CallToolResult | None = None
    questions: Mapping[str, CallerRequest] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        return self.status in ("done", "cancelled", "lost")


@dataclass(eq=False)
class TaskRun:
    """A task whose run is on this replica."""

    run: ParkedRun
    created: str
    ttl_ms: int
    relay: Callable[[str, int, str], Awaitable[None]] | None = None  # progress to its caller (2025-11-25)
    message: str | None = None
    updated: str = ""
    asking: set[str] = field(default_factory=set)  # the questions a `tasks/result` is putting to the caller now

    @property
    def id(self) -> str:
        return self.run.id

    async def emit(self, event: ev.Event) -> None:
        """The run's progress: its latest line is the task's status message (and goes to `relay`)."""
        if (message := progress_message(event)) is None:
            return
        self.message, self.updated = message[:MESSAGE_CHARS], iso(now())
        if self.relay is not None:
            await self.relay(self.id, next(self.run.ticks), message)


# The task whose run the current call is (the tool functions read it to run as that task), set in its background.
CURRENT: ContextVar[TaskRun | None] = ContextVar("meta_agent_task", default=None)


class TaskRefused(Exception):
    """A task could not be made; the message says why, in one line."""


class TaskBoard:
    """The tasks of this process, and (through the database) of every replica sharing it."""

    def __init__(
        self,
        tg: anyio.abc.TaskGroup,
        rows: TaskRows,
        spaces: ParkingSpaces,
        shared: SharedRounds | None,
        *,
        ttl_cap: float,
        max_tasks: int,
        events: RunEvents,
        cancel_run: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        """`ttl_cap`: META_AGENT_TASK_TTL, seconds; `events`: the runs' events (a task running on another replica
        reads with its latest progress line); `cancel_run`: with durable runs (a task whose replica stops is finished
        by another, so an interrupted run is still working), cancels a run for good on every replica, whichever runs
        it or resumes it next."""
        self._tg = tg
        self._rows = rows
        self._spaces = spaces
        self._shared = shared
        self._events = events
        self._cancel_run = cancel_run
        self._ttl_cap_ms = max(MIN_TTL_MS, int(ttl_cap * 1000))
        self._max_tasks = max_tasks
        self._resumable = cancel_run is not None
        self._live: dict[str, TaskRun] = {}
        self._results: OrderedDict[str, t.CallToolResult] = OrderedDict()

    def ttl_ms(self, requested: int | None) -> int:
        """The time a task is kept: what its caller asked for, within MIN_TTL_MS and META_AGENT_TASK_TTL."""
        return self._ttl_cap_ms if requested is None else max(MIN_TTL_MS, min(requested, self._ttl_cap_ms))

    async def start(
        self,
        owner: str,
        tool: str,
        call: Callable[[], Awaitable[t.CallToolResult]],
        *,
        ttl_ms: int | None,
        sampling: bool,
        relay: Callable[[str, int, str], Awaitable[None]] | None = None,
    ) -> TaskView:
        """A new task of `owner`, whose run is `call()`, started in the background; returned once any replica can
        read it.

        Raises:
            TaskRefused: META_AGENT_MAX_TASKS tasks run already, or the database cannot be written.
        """
        if len(self._live) >= self._max_tasks:
            raise TaskRefused(
                f"{self._max_tasks:,} tasks already run (META_AGENT_MAX_TASKS); wait for one to end, or cancel one"
            )
        task_id, ttl = random_ulid(), self.ttl_ms(ttl_ms)
        run = ParkedRun(
            self._spaces, sampling=sampling, shared=self._shared, parked_id=task_id, detached=True, owner=owner
        )
        created = iso(now())
        # Its place is taken before the first await, so that calls made at once each count the others'; nothing
        # finds the task by its id before its row is written.
        task = self._live[task_id] = TaskRun(run, created, ttl, relay, message=STARTING, updated=created)
        try:
            await self._rows.create(task_id, owner, tool, ttl)
            await anyio.lowlevel.checkpoint_if_cancelled()  # a caller gone meanwhile: its task does not run
        except BaseException as exc:  # refused, or its caller gone: the place is given back
            del self._live[task_id]
            if isinstance(exc, self._rows.database.errors):
                raise TaskRefused(f"cannot record the task in {self._rows.database.label}: {exc}") from None
            raise

        async def work() -> t.CallToolResult:
            CURRENT.set(task)  # this task's own context: the tool function reads it
            return await call()

        self._tg.start_soon(run.execute, work, lambda: self._ended(task))
        return self._live_view(task)

    async def view(self, owner: str, task_id: str, *, whole: bool = False) -> TaskView | None:
        """How the task is; None if `owner` has no such task (never had, or it expired). `whole`: its result whole,
        with its images (what `tasks/result` and a 2026-07-28 `tasks/get` return); else without them (what a status
        reads: a listing, a 2025-11-25 `tasks/get`)."""
        row = await self._read(owner, task_id, whole=whole)
        return None if row is None else await self._view(row)

    async def page(self, owner: str, cursor: str | None) -> tuple[list[TaskView], str | None]:
        """`owner`'s tasks from `cursor` on, and the next page's cursor (None: this is the last).

        Raises:
            TaskRefused: the database cannot be read.
        """
        try:
            rows, after = await self._rows.page(owner, cursor)
        except self._rows.database.errors as exc:
            raise TaskRefused(f"cannot read the tasks in {self._rows.database.label}: {exc}") from None
        return [await self._view(row) for row in rows], after

    async def answer(self, owner: str, task_id: str, responses: Mapping[str, t.InputResponse]) -> bool:
        """Give the task the caller's answers, each under its question's key; answers to questions not pending
        (answered already, replayed, never asked) are ignored. False: `owner` has no such task."""
        if (row := await self._read(owner, task_id)) is None:
            return False
        asked = (await self._view(row)).questions  # the one pending: at most one write, however many keys came
        for key, response in responses.items():
            if key in asked:
                name, _, seq = key.rpartition("-")
                await self._answer(owner, task_id, int(seq), name, response)
        return True

    async def cancel(self, owner: str, task_id: str) -> tuple[TaskView, bool] | None:
        """Cancel the task, with its run and its children's calls; it reads `cancelled` from now on, however its run
        ends. A task that has ended is left as it is. How it is now, and whether this cancelled it; None: `owner` has
        no such task."""
        view = await self.view(owner, task_id)
        if view is None or view.terminal:
            return None if view is None else (view, False)
        try:
            await self._rows.cancel(task_id)
        except self._rows.database.errors as exc:
            log.warning("task_cancel_not_recorded", task_id=task_id, error=str(exc))
        if (task := self._live.get(task_id)) is not None:
            task.run.scope.cancel()
        else:
            if self._shared is not None:  # the replica running it stops it now
                await self._shared.notify(Note(task_id, "cancel"))
            if self._cancel_run is not None:  # and it stops at its next step wherever it runs, or is resumed
                await self._cancel_run(task_id)
        return replace(view, status="cancelled", message=CANCELLED, questions={}, updated=iso(now())), True

    async def owned(self, task_id: str) -> tuple[str, TaskRow] | None:
        """The task `task_id` and whose it is, for a run resumed here (None: the run is no task's, or the database
        cannot say: the run goes on without its caller, as any resumed run did before tasks followed theirs)."""
        try:
            return await self._rows.owned(task_id)
        except self._rows.database.errors as exc:
            log.warning("resumed_task_not_read", task_id=task_id, error=str(exc))
            return None

    async def carry(self, owner: str, row: TaskRow, work: Callable[[TaskRun], Awaitable[t.CallToolResult]]) -> None:
        """Run `work` here and now as the run of `owner`'s task (`row`), made on a replica that stopped, resumed
        here (durable runs): the task's caller comes back with it, as with a task made here (its progress is the
        task's status message, its questions make the task `input_required`, answered through any replica, its
        cancel stops it). `work` is cancelled where the task's run is stopped (the task cancelled, a question not
        answered in time, META_AGENT_MAX_PARKED runs waiting already)."""
        run = ParkedRun(self._spaces, shared=self._shared, parked_id=row.task_id, detached=True, owner=owner)
        task = TaskRun(run, iso(row.created), row.ttl_ms, message=RESUMED, updated=iso(now()))
        self._live[row.task_id] = task
        await run.execute(partial(work, task), lambda: self._ended(task))

    async def settled(
        self, owner: str, task_id: str, ask: Callable[[CallerRequest], Awaitable[t.InputResponse | None]]
    ) -> TaskView | None:
        """Wait for the task to end, putting each of its questions to `ask` meanwhile, once; then how it ended.
        The wait is bounded by the run's own limits. None: `owner` has no such task."""
        asked: set[str] = set()
        while (view := await self.view(owner, task_id, whole=True)) is not None and not view.terminal:
            task = self._live.get(task_id)
            asking = task.asking if task is not None else set()  # another reader's question is not asked twice
            for key, request in view.questions.items():
                if key not in asked and key not in asking:
                    asked.add(key)
                    asking.add(key)
                    try:  # held until the answer is in: another reader must not see the question pending meanwhile
                        if (response := await ask(request)) is not None:
                            await self.answer(owner, task_id, {key: response})
                    finally:
                        asking.discard(key)
            with anyio.move_on_after(POLL_SECONDS):
                await (task.run.changed() if task is not None else anyio.sleep_forever())
        return view

    async def sweep(self) -> None:
        """Drop the tasks past their time, every SWEEP_SECONDS, for as long as the server runs."""
        while True:
            await anyio.sleep(SWEEP_SECONDS)
            try:
                await self._rows.forget_expired()
            except self._rows.database.errors as exc:
                log.warning("tasks_not_swept", error=str(exc), database=self._rows.database.label)

    # -- below -----------------------------------------------------------------------------------------------------

    async def _read(self, owner: str, task_id: str, *, whole: bool = False) -> TaskRow | None:
        try:
            return await self._rows.read(task_id, owner, images=whole)
        except self._rows.database.errors as exc:
            raise TaskRefused(f"cannot read the task in {self._rows.database.label}: {exc}") from None

    def _ended(self, task: TaskRun) -> None:
        if self._live.get(task.id) is task:  # not a later run of the same task (resumed here while this one ended)
            del self._live[task.id]
        latest = task.run.latest()
        if latest is not None and isinstance(latest[1], t.CallToolResult):
            self._results[task.id] = latest[1]
            while len(self._results) > KEEP_RESULTS:
                self._results.popitem(last=False)

    async def _answer(self, owner: str, task_id: str, seq: int, key: str, response: t.InputResponse) -> None:
        """Answer question `seq` of `owner`'s task, here or (shared rounds) on whichever replica runs it; once."""
        task = self._live.get(task_id)
        if task is not None and task.run.can_answer(seq) is not None:
            return
        if self._shared is not None:
            try:
                dumped = {key: response.model_dump(mode="json", by_alias=True)}
                if await self._shared.answer(task_id, seq, dumped, owner) is not None:
                    return  # taken already (a replay), or no such question
            except self._shared.database.errors as exc:
                log.warning("task_answer_not_shared", task_id=task_id, error=str(exc))
        if task is not None:
            task.run.answer(seq, {key: response})

    def _live_view(self, task: TaskRun) -> TaskView:
        latest = task.run.latest()
        questions: dict[str, CallerRequest] = {}
        if latest is not None and isinstance(latest[1], Question) and task.run.can_answer(latest[0]) is None:
            question = latest[1]
            questions[f"{question.key}-{question.seq}"] = question.request
        return TaskView(
            task_id=task.id,
            status="input_required" if questions else "working",
            message=task.message,
            created=task.created,
            updated=task.updated,
            ttl_ms=task.ttl_ms,
            questions=questions,
        )

    async def _view(self, row: TaskRow) -> TaskView:
        """How the task of `row` is: from its run here, else from the run index (and the shared rounds)."""
        if not row.cancelled and (task := self._live.get(row.task_id)) is not None and not task.run.ended:
            return self._live_view(task)
        run = row.run
        updated = iso(run.updated) if run is not None else iso(row.created)
        base = TaskView(
            task_id=row.task_id,
            status="working",
            message=None,
            created=iso(row.created),
            updated=updated,
            ttl_ms=row.ttl_ms,
        )
        kept = self._results.get(row.task_id)
        if row.cancelled:
            return replace(base, status="cancelled", message=CANCELLED)
        if run is None:  # not started yet; or, with a result kept, failed before it began (an argument refused)
            if kept is not None:
                return replace(base, status="done", result=kept)
            if row.task_id in self._live or row.age < START_GRACE:
                return base
            return replace(base, status="lost", message=NEVER_STARTED)
        if run.status == "running":
            return await self._remote_view(row, base)
        if run.status == "interrupted":
            if self._resumable:
                return replace(base, message=f"its replica ({run.replica}) stopped; another replica takes it over")
            return replace(base, status="lost", message=LOST)
        if run.result is not None:
            return replace(base, status="done", result=stored_result(run))
        if run.error == "cancelled":  # not by its caller (row.cancelled): reaped unanswered, or the server stopped
            return replace(base, status="lost", message=STOPPED)
        if run.error == NOT_RESUMABLE:  # ended by an upgrade, not by what it did: failed, as a run whose process died
            return replace(base, status="lost", message=NOT_RESUMABLE)
        return replace(base, status="done", result=kept or tool_error(run.error or "the run ended without a result"))

    async def _remote_view(self, row: TaskRow, base: TaskView) -> TaskView:
        """A task running on another replica: working, or asking the question its parked round holds."""
        assert row.run is not None
        pending = None
        if self._shared is not None:
            try:
                pending = await self._shared.pending(row.task_id)
            except self._shared.database.errors as exc:
                log.warning("task_question_not_read", task_id=row.task_id, error=str(exc))
        questions = {} if pending is None else _questions(pending.asked, pending.body)
        status: Status = "input_required" if questions else "working"
        try:  # its replica's latest progress line, as it would read there
            line = await self._events.line(row.task_id)
        except self._events.errors as exc:
            log.warning("task_progress_not_read", task_id=row.task_id, error=str(exc))
            line = None
        message = (line or f"running on replica {row.run.replica}")[:MESSAGE_CHARS]
        return replace(base, status=status, message=message, questions=questions)


LOST = "the process that ran it ended before the run finished"
STOPPED = "its run was stopped before it finished: a question was not answered in time, or the server stopped"
NEVER_STARTED = "its run never started (it was refused, or the process that made it stopped first)"


CANCELLED = "cancelled by its caller"


def _questions(seq: int, body: Mapping[str, Any]) -> dict[str, CallerRequest]:
    """The questions of a parked round as its replica posted it (an input-required result), keyed as tasks key them."""
    try:
        requests = _requests().validate_python(body.get("inputRequests") or {})
    except ValidationError:
        return {}
    return {f"{key}-{seq}": request for key, request in requests.items() if isinstance(request, CallerRequest)}


@cache
def _requests() -> TypeAdapter[t.InputRequests]:
    """What a parked round's `inputRequests` hold (built on first use: only replicas sharing rounds read them)."""
    return TypeAdapter(t.InputRequests)


def iso(stamp: str) -> str:
    """A row's time (`2026-11-27 22:40:00`, UTC) as ISO 8601 (`2026-11-27T22:40:00Z`)."""
    return stamp.replace(" ", "T") + ("" if stamp.endswith("Z") else "Z")
