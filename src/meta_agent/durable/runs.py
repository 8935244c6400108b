"""Durable runs (README, Replicas on PostgreSQL): with a PostgreSQL database every run is a DBOS workflow, and each
model turn, tool call and approval of it a checkpointed step, so a run whose replica dies is finished by a surviving
(or the restarted) replica from its last completed step, and a tool call that completed never runs again.

DBOS (the `dbos` library) keeps workflows and their steps in tables of the database the replicas already share
(schema `dbos`, which DBOS migrates itself); it needs no server of its own. The loop knows nothing of it: a run's
model, tool runner and approver are wrapped here (`RunSteps`), so that each call of theirs is a step.

Replay: a resumed run runs the loop again from its start, and every step that had completed returns its recorded
outcome instead of running, so the loop reaches the state it was in and goes on from the first step that had not
completed. Steps run one after another, except the tool calls of one model turn, which run concurrently: their step
numbers are drawn in the order the model gave them, as soon as its answer is known, so each call meets its own
record however the calls interleave. find_tools and read_result are no steps: they only read the run's own state,
which replay rebuilds.

Who finishes a run whose replica died: the run index marks a running run's row alive while its replica runs it. Each
replica looks, every third of that mark's span, for rows whose mark lapsed, takes each in one update (so only one
replica takes it), and has DBOS resume it; DBOS's queue gives it to exactly one replica to run (and should that one stop
before the run's first write names it in the index, the row lapses again and the run is handed on again). A replica
whose engine stops leaves the runs it resumed interrupted, for the next, as a stopping process leaves all its runs. The
index takes the writes of the replica running a run only: one that lost it cannot end it. A resumed run has the caller
the engine's `resumed` hook finds for it: a run that is an MCP task's is run as that task's here, so its caller comes
back with the task (front/tasks/resumed.py); any other has none: nobody hears its progress, its model cannot be the
host's (sampling), and a call whose approval was not answered before is refused.

Cancelling a run for good (its task cancelled through any replica) marks it cancelled in its DBOS record, whose every
later step DBOS refuses, wherever it runs; its replica, told at once, stops it there and then. A resumption checks its
task first: a cancel that landed while no replica ran it (between its hand-on and its start, which DBOS's resume would
undo) ends it before its first step.

Deploys: replicas give DBOS the durable-run format (durable/format.py: what a run's record holds, versioned apart from
meta-agent's own version and bumped only when that changes) as their application version, and DBOS hands a queued run
only to a replica of the version it was recorded under. So the replicas of two releases of one format finish each
other's runs, and a run of another format is handed on as any other, to whichever replica of its format DBOS finds
(a rolling deploy: one of the old release still serving). Every replica polls DBOS's queue every few seconds
(durable/quiet.py): a run still queued STRANDED_SECONDS after it was handed on (seen at a later look, once its row's
mark lapses again) has no replica of its format left, and it is ended as failed, `NOT_RESUMABLE`, cancelled in DBOS
first so that no replica of any format resumes it after; it is never left interrupted for good.

A database outage: DBOS holds each step's write and retries it until the database is back (a step that completed
meanwhile is recorded then, so it never runs again), and the run waits there; the run index keeps the run's row from
being handed on meanwhile (store/run_index.py). Should a replica lose a run all the same (it stalled, or was cut
off from the database alone, and another took the run over), DBOS refuses its next write: that execution stops there,
and its caller is told in one line where the run is (`RunLost`); the replica serves on.

dbos is imported only here, and only with a PostgreSQL database (about 300 ms).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import anyio
import structlog

from meta_agent.core.events import Emit, Event, ToolCallStarted
from meta_agent.core.result import RunResult
from meta_agent.core.run_spec import RunBody, RunSpec
from meta_agent.durable import quiet
from meta_agent.durable.faults import Lost, RunLost, cancelled_error, is_cancel, unwrapped, without_traceback
from meta_agent.durable.format import APPLICATION_VERSION
from meta_agent.durable.steps import RunSteps
from meta_agent.errors import ConfigError, RunCancelled, summary
from meta_agent.records.logs import route_through_ours
from meta_agent.shared.text import plural
from meta_agent.store.database import Sql
from meta_agent.store.run_index import NOT_RESUMABLE, RunIndex, stopping
from meta_agent.store.tasks import task_cancelled

log = structlog.get_logger(__name__)
T = TypeVar("T")
C = TypeVar("C")  # what a run has of its caller: kept for the run started here, handed back to its body
WORKFLOW = "meta-agent run"
MAX_RESUMES = 3  # hand-ons of a run after its replica stopped before it is given up (META_AGENT_MAX_RESUMES)
# A look for runs to resume that failed (the database unreachable) is tried again this soon, at most: the replica's
# /health says 503 until one goes through.
RETRY_SECONDS = 1.0
# A run of another durable-run format still queued this long after it was handed on has no replica of its format left:
# each replica polls DBOS's queue every few seconds (quiet.queue_poll), so a live one would have taken it twice over.
STRANDED_SECONDS = 2 * quiet.LONGEST_QUEUE_POLL
# The threads DBOS hands its statements to (a step's look-up and its record, a run's start and end). Left unbounded,
# as DBOS leaves them, a burst of runs starts dozens, which take turns on the interpreter's lock and the connection
# pool: 4 cost 15-20% less CPU a durable run than DBOS's default in the replica benchmark's bursts, and overlap as many
# statements waiting on a distant database.
DBOS_THREADS = 4


_active: DurableRuns[Any] | None = None  # DBOS is one per process, and so is this
_workflow: Callable[[RunSpec], Awaitable[RunResult]] | None = None


def _registered() -> Callable[[RunSpec], Awaitable[RunResult]]:
    """The run workflow, registered with DBOS once per process (DBOS finds a resumed run's code by its name)."""
    global _workflow
    if _workflow is None:
        from dbos import DBOS

        @DBOS.workflow(name=WORKFLOW)
        async def run_workflow(spec: RunSpec) -> RunResult:
            assert _active is not None, "a run resumed in a process whose durable runs have stopped"
            return await _active.body_of(spec)

        _workflow = run_workflow
    return _workflow


class DurableRuns(Generic[C]):
    def __init__(
        self,
        url: str,
        replica: str,
        index: RunIndex,
        *,
        max_resumes: int = MAX_RESUMES,
        check_every: float | None = None,
    ) -> None:
        """`replica`: this process's name in DBOS (its executor id) and in the run index. `max_resumes`: how often a
        run is handed on after its replica stopped before it is given up. `check_every`: how often to look for runs to
        resume (a third of the run index's mark by default)."""
        self.url = url
        self.replica = replica
        self.index = index
        self.max_resumes = max_resumes
        self.check_every = check_every if check_every is not None else index.alive_seconds / 3
        self._body: RunBody[C] | None = None
        self._callers: dict[str, C] = {}  # by run id: the caller of a run started here, while it runs
        self._resumed: dict[asyncio.Task[Any], str] = {}  # the runs resumed here, by the task that runs each
        self._cancelling: set[str] = set()  # runs resumed here whose caller cancelled them (their task, elsewhere)
        self._watch: anyio.abc.TaskGroup | None = None

    async def start(self, body: RunBody[C]) -> None:
        """Launch DBOS on this event loop (a resumed run runs on it), and look for runs to resume from now on.

        Raises:
            ConfigError: another engine of this process has durable runs already.
        """
        global _active
        if _active is not None:
            raise ConfigError("META_AGENT_DATABASE_URL: one engine per process can have durable runs")
        _registered()  # before the launch, which may resume runs
        from dbos import DBOS

        dbos = DBOS(
            config={
                "name": "meta-agent",
                "system_database_url": self.url,
                "executor_id": self.replica,
                "application_version": APPLICATION_VERSION,  # DBOS hands a run only to replicas of its format
                "log_level": "WARNING",
                # DBOS's notifications wake workflows waiting on messages, events and streams, none of which meta-agent
                # uses; listening for them woke a thread ten times a second, and pushing them another a hundred
                "use_listen_notify": False,
                "max_executor_threads": DBOS_THREADS,
            }
        )
        quiet.before_launch(dbos, self.check_every)
        route_through_ours("dbos")  # DBOS's lines (tracebacks of an outage) as ours, one JSON line each, not its own
        logging.getLogger("dbos").addFilter(without_traceback)
        # DBOS's launch is a few dozen statements (its migrations, its look for runs of this replica to recover):
        # on a worker thread, so a slow database cannot stall the event loop. DBOS runs the workflows it starts itself
        # (recovered, dequeued) on the loop that launched it: this one, named to it first (`on_this_loop`); a run it
        # recovers may start as soon as it launches, so this replica is ready to run one before.
        self._body = body
        _active = self
        quiet.on_this_loop(dbos)
        try:
            await anyio.to_thread.run_sync(DBOS.launch)
        except BaseException:
            _active = None
            DBOS.destroy()
            raise
        quiet.after_launch(dbos)
        self._watch = anyio.create_task_group()
        await self._watch.__aenter__()
        self._watch.start_soon(self._resume_lapsed)

    async def stop(self) -> None:
        global _active
        if self._watch is not None:
            self._watch.cancel_scope.cancel()
            await self._watch.__aexit__(None, None, None)
            self._watch = None
        for task, run_id in list(self._resumed.items()):  # runs resumed here stop with it; another replica resumes them
            self.index.leave(run_id)  # not `done` as cancelled: nobody cancelled it
            task.cancel()
        if self._resumed:
            await asyncio.wait(list(self._resumed))
        if _active is self:
            from dbos import DBOS

            DBOS.destroy()
            _active = None

    async def run(self, run_id: str, spec: RunSpec, caller: C) -> RunResult:
        """Run `spec` as the durable run `run_id`, here and now (cancelling the caller cancels it)."""
        from dbos import SetWorkflowID

        self._callers[run_id] = caller
        try:
            with SetWorkflowID(run_id):
                return await _registered()(spec)
        except Lost as lost:
            log.warning("run_lost", run_id=run_id, error=summary(lost.error))
            if is_cancel(lost.error):  # its task was cancelled through another replica: it stopped at its next step
                with anyio.CancelScope(shield=True):
                    await self.index.given_up(run_id, "cancelled")
            raise RunLost(run_id, lost.error) from None
        except anyio.get_cancelled_exc_class():
            if not stopping():  # its caller cancelled it: DBOS must not resume it either
                with anyio.CancelScope(shield=True):
                    await _cancelled(run_id)
            raise
        finally:
            self._callers.pop(run_id, None)

    async def body_of(self, spec: RunSpec) -> RunResult:
        """The body of the run workflow: with its caller when it was started here, else resumed (no caller)."""
        from dbos import DBOS

        run_id = DBOS.workflow_id
        assert self._body is not None and run_id is not None
        caller = self._callers.pop(run_id, None)  # its first execution's: one DBOS starts again here has none
        if caller is not None:
            return await unwrapped(self._body(spec, caller), has_caller=True)
        task = asyncio.current_task()
        assert task is not None
        self._resumed[task] = run_id  # a cancel through another replica reaches it from now on (`cancel`)
        log.info("run_resumed", run_id=run_id)
        try:
            if await self._cancelled_before(run_id):
                await self.index.given_up(run_id, "cancelled")
                raise RunCancelled(run_id)
            return await unwrapped(self._body(spec, None), has_caller=False)
        except RunCancelled:  # by its task's caller: DBOS must not resume it again, and says nothing of it
            await asyncio.shield(_cancelled(run_id))
            raise cancelled_error(run_id) from None
        except asyncio.CancelledError:
            if run_id in self._cancelling:  # its caller cancelled it: DBOS must not resume it either
                await asyncio.shield(_cancelled(run_id))
            raise
        except BaseException as exc:
            if is_cancel(exc):  # cancelled through another replica, whose word did not reach this one: at a step
                await asyncio.shield(self.index.given_up(run_id, "cancelled"))
            raise
        finally:
            del self._resumed[task]
            self._cancelling.discard(run_id)

    async def _cancelled_before(self, run_id: str) -> bool:
        """Whether the run's task was cancelled before this resumption began (between its hand-on and now, while no
        replica ran it, a cancel has nobody to tell but its task's row). Where the database cannot say, it goes on:
        its durable record refuses its next step if it was."""
        try:
            return await self.index.database.call(task_cancelled, run_id)
        except self.index.database.errors as exc:
            log.warning("run_cancel_not_read", run_id=run_id, error=summary(exc))
            return False

    async def cancel_for_good(self, run_id: str) -> None:
        """Mark the run `run_id` cancelled in its durable record, wherever it runs: no step of it starts again (DBOS
        refuses each from then on), and no replica resumes it. Its task was cancelled through this replica, and
        another runs it, or none does (its replica stopped), or one is about to resume it."""
        await _cancelled(run_id)

    def cancel(self, run_id: str) -> bool:
        """Cancel the run `run_id` if it was resumed here, as its caller would (its MCP task was cancelled through
        another replica): it ends `done`, cancelled, and is not resumed again. False: it is not resumed here."""
        for task, resumed in self._resumed.items():
            if resumed == run_id:
                self._cancelling.add(run_id)
                task.cancel()
                return True
        return False

    async def steps(self, *, can_ask: bool) -> RunSteps:
        """The steps of the run being run now (call within its body). A resumed run's clock counts from its first
        start, and replays its record as the time was then (RunSteps.elapsed): the run's DBOS record says when."""
        task = asyncio.current_task()
        run_id = self._resumed.get(task) if task is not None else None
        if run_id is None:
            return RunSteps(can_ask=can_ask)
        started, ended = await self.index.database.call(_record_times, run_id)
        return RunSteps(can_ask=can_ask, started=started, recorded=ended, resumed=True)

    async def _resume_lapsed(self) -> None:
        """Look for runs to resume every `check_every`; while the database cannot be reached, every RETRY_SECONDS
        (said once when it fails, once when it answers again)."""
        failing = False
        while True:
            await anyio.sleep(min(RETRY_SECONDS, self.check_every) if failing else self.check_every)
            try:
                taken = await self.index.take_lapsed()
            except self.index.database.errors as exc:
                if not failing:
                    log.warning("runs_not_resumed", error=summary(exc), database=self.index.database.label)
                failing = True
                continue
            if failing:
                log.info("database_reached", database=self.index.database.label)
            failing = False
            for run_id, replica in taken:
                await self._resume(run_id, replica)

    async def _resume(self, run_id: str, replica: str) -> None:
        """Hand on the run `replica` ran and stopped renewing, unless another replica runs it already (DBOS names
        who runs it: the replica that took it from its queue). A run of another durable-run format is handed on as
        any other, for DBOS to give to a replica of its format; still queued STRANDED_SECONDS later, none is left,
        and it is ended."""
        from dbos import DBOS

        try:
            status = await DBOS.get_workflow_status_async(run_id)
            if status is None:  # its replica died before the run's first record
                await self.index.given_up(run_id, "interrupted before it started; it was not resumed")
                return
            # PENDING here: this replica took it from DBOS's queue and runs it, and the run's first write, which
            # marks its row, has not come yet (a loaded machine, a short mark); only this process ends that execution
            if status.status == "PENDING" and status.executor_id == self.replica:
                return
            ours = status.app_version in (None, APPLICATION_VERSION)
            # ENQUEUED, of another format, for STRANDED_SECONDS: no replica of its format took it from DBOS's queue
            # (sooner, the row's mark lapses again, and the next look sees)
            stranded = status.status == "ENQUEUED" and not ours and await self._queued_long(run_id)
            # PENDING elsewhere: `replica` ran it, or another replica took it from DBOS's queue and stopped before the
            # run's first write named it here (that write comes first, and the row was marked for a whole span since)
            if (status.status == "PENDING" or stranded) and await self.index.database.call(task_cancelled, run_id):
                await _cancelled(run_id)  # its MCP task was cancelled while no replica ran it
                await self.index.given_up(run_id, "cancelled")
            elif stranded:
                await self._end_unresumable(run_id, status.app_version)
            elif status.status == "PENDING":
                if not ours:
                    log.info("run_left_to_its_format", run_id=run_id, format=status.app_version)
                await self._hand_on(run_id, status.executor_id)
            elif status.status == "CANCELLED" and await self.index.database.call(task_cancelled, run_id):
                await self.index.given_up(run_id, "cancelled")  # its task was, while no replica ran it
            # ENQUEUED, of this format: DBOS gives it to a replica; ended: its row was left behind, its record says how
            elif status.status in ("SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"):
                await self.index.given_up(run_id, f"interrupted; its durable record says {status.status.lower()}")
        except Exception as exc:  # the next look tries again: the row's mark lapses again
            log.warning("run_not_resumed", run_id=run_id, error=f"{type(exc).__name__}: {exc}")

    async def _queued_long(self, run_id: str) -> bool:
        """Whether the run has been in DBOS's queue STRANDED_SECONDS since it was handed on, by the database's clock
        (replicas' clocks may disagree)."""
        queued = await self.index.database.call(_queued_seconds, run_id)
        return queued is not None and queued >= STRANDED_SECONDS

    async def _end_unresumable(self, run_id: str, version: str | None) -> None:
        """End, as failed, a run recorded in another durable-run format (`version`) that no replica of that format is
        left to finish: this code cannot replay its record. Cancelled in DBOS first, so that no replica of any format
        resumes it after; its row then says why, in one line, to its task and to `meta-agent runs`."""
        from dbos import DBOS

        await DBOS.cancel_workflow_async(run_id)
        await self.index.given_up(run_id, NOT_RESUMABLE)
        log.warning("run_not_resumable", run_id=run_id, format=version, replica_format=APPLICATION_VERSION)

    async def _hand_on(self, run_id: str, replica: str | None) -> None:
        """Have DBOS resume the run, unless it has been resumed `max_resumes` times already: a run that took each of
        its replicas down (a step that never returns, or stalls the event loop) would take every replica down in
        turn; it is given up instead, for good."""
        from dbos import DBOS

        resumes, doing = await self.index.resumed(run_id)
        if resumes <= self.max_resumes:
            await DBOS.resume_workflow_async(run_id)
            log.info("run_handed_on", run_id=run_id, replica=replica, resumption=resumes)
            return
        where = doing or "a model turn, before any tool call"
        why = f"given up after {plural(self.max_resumes, 'resumption')}; it was in {where}"
        await DBOS.cancel_workflow_async(run_id)  # DBOS never resumes it again
        await self.index.given_up(run_id, why)
        log.warning("run_given_up", run_id=run_id, why=why)

    def noting(self, run_id: str) -> Emit:
        """A sink of the run's events that notes in the run index the tool call it is in, for `_hand_on` to say. Tool
        calls only: a note is a transaction, and a model turn, bounded by its own timeout, is not what takes a
        replica down."""

        async def note(event: Event) -> None:
            if isinstance(event, ToolCallStarted):
                await self.index.doing(run_id, f"step {event.step} ({event.name})")

        return note


def _record_times(sql: Sql, run_id: str) -> tuple[float | None, list[float]]:
    """When the run first started, and when each step of its record ended (seconds since the epoch), read from DBOS's
    tables (`dbos.workflow_status`, `dbos.operation_outputs`, its documented system database) with our connection:
    DBOS's own readers, called within a workflow, would be recorded as steps of it, which the first execution did not
    have."""
    created = sql.one("select created_at from dbos.workflow_status where workflow_uuid = ?", (run_id,))
    rows = sql.all(
        "select completed_at_epoch_ms from dbos.operation_outputs"
        " where workflow_uuid = ? and completed_at_epoch_ms is not null",
        (run_id,),
    )
    started = None if created is None or created[0] is None else created[0] / 1000
    return started, [row[0] / 1000 for row in rows]


def _queued_seconds(sql: Sql, run_id: str) -> float | None:
    """How long ago the run's DBOS record last changed, by the database's clock: for a queued run, how long it has
    waited in the queue (DBOS writes `updated_at`, milliseconds since the epoch, when it enqueues a run)."""
    row = sql.one(
        f"select {sql.clock} - updated_at / 1000.0 from dbos.workflow_status where workflow_uuid = ?", (run_id,)
    )
    return None if row is None or row[0] is None else float(row[0])


async def _cancelled(run_id: str) -> None:
    from dbos import DBOS

    try:
        await DBOS.cancel_workflow_async(run_id)
    except Exception as exc:  # its row says `done` (cancelled): no replica resumes it anyway
        log.warning("run_not_marked_cancelled", run_id=run_id, error=f"{type(exc).__name__}: {exc}")
