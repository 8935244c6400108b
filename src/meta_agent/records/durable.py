"""Durable runs (design.md §7): with a PostgreSQL database every run is a DBOS workflow, and each model turn, tool
call and approval of it a checkpointed step, so a run whose replica dies is finished by a surviving (or the
restarted) replica from its last completed step, and a tool call that completed never runs again.

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
index takes the writes of the replica running a run only: one that lost it cannot end it. A resumed run has no caller:
nobody hears its progress, its model cannot be the host's (sampling), and a call whose approval was not answered before
is refused. Runs of another meta-agent version are left to the replicas of that version (DBOS refuses to replay them
with other code): one that takes such a run lets go of it at once, so that during a deploy a replica of the old version
finishes it; once none is left, it stays interrupted.

A database outage: DBOS holds each step's write and retries it until the database is back (a step that completed
meanwhile is recorded then, so it never runs again), and the run waits there; the run index keeps the run's row from
being handed on meanwhile (records/run_index.py). Should a replica lose a run all the same (it stalled, or was cut
off from the database alone, and another took the run over), DBOS refuses its next write: that execution stops there,
and its caller is told in one line where the run is (`RunLost`); the replica serves on.

dbos is imported only here, and only with a PostgreSQL database (about 300 ms).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import structlog

from meta_agent.core.events import Emit, Event, ModelTurnStarted, ToolCallStarted
from meta_agent.core.messages import ModelRequest, ModelResponse, ToolCall
from meta_agent.core.provider import Provider
from meta_agent.core.tool_call import READ_RESULT, Approver, Asking, Verdict
from meta_agent.core.tool_step import ToolRunner
from meta_agent.core.tools import FIND_TOOLS, ProgressFn, RunContext, ToolOutcome, ToolSpec
from meta_agent.errors import ConfigError, summary
from meta_agent.records.durable_faults import Lost, RunLost, unwrapped, without_traceback
from meta_agent.records.logs import route_through_ours
from meta_agent.records.run_index import RunIndex, stopping
from meta_agent.text import plural

log = structlog.get_logger(__name__)
T = TypeVar("T")
# A run's body: its spec and its caller (None for a resumed run, which has none) to its result.
Body = Callable[[Any, Any], Awaitable[Any]]
WORKFLOW = "meta-agent run"
NOBODY_TO_ASK = "not run: the run was resumed after its replica stopped, and nobody is left to ask for approval"
MAX_RESUMES = 3  # hand-ons of a run after its replica stopped before it is given up (META_AGENT_MAX_RESUMES)
# Tools whose calls are no steps: they read only the run's own state, which a replay rebuilds.
REPLAYED = frozenset({FIND_TOOLS, READ_RESULT})
# A look for runs to resume that failed (the database unreachable) is tried again this soon, at most: the replica's
# /health says 503 until one goes through.
RETRY_SECONDS = 1.0


_active: DurableRuns | None = None  # DBOS is one per process, and so is this
_workflow: Callable[[Any], Awaitable[Any]] | None = None


def _registered() -> Callable[[Any], Awaitable[Any]]:
    """The run workflow, registered with DBOS once per process (DBOS finds a resumed run's code by its name)."""
    global _workflow
    if _workflow is None:
        from dbos import DBOS

        @DBOS.workflow(name=WORKFLOW)
        async def run_workflow(spec: Any) -> Any:
            assert _active is not None, "a run resumed in a process whose durable runs have stopped"
            return await _active.body_of(spec)

        _workflow = run_workflow
    return _workflow


class DurableRuns:
    def __init__(
        self,
        url: str,
        replica: str,
        index: RunIndex,
        *,
        version: str,
        max_resumes: int = MAX_RESUMES,
        check_every: float | None = None,
    ) -> None:
        """`replica`: this process's name in DBOS (its executor id) and in the run index. `version`: runs started by
        another version are not resumed here. `max_resumes`: how often a run is handed on after its replica stopped
        before it is given up. `check_every`: how often to look for runs to resume (a third of the run index's mark
        by default)."""
        self.url = url
        self.replica = replica
        self.index = index
        self.version = version
        self.max_resumes = max_resumes
        self.check_every = check_every if check_every is not None else index.alive_seconds / 3
        self._body: Body | None = None
        self._callers: dict[str, Any] = {}  # by run id: the caller of a run started here, while it runs
        self._resumed: dict[asyncio.Task[Any], str] = {}  # the runs resumed here, by the task that runs each
        self._watch: anyio.abc.TaskGroup | None = None
        self._other_versions: set[str] = set()  # runs of another version, left to its replicas (said once)

    async def start(self, body: Body) -> None:
        """Launch DBOS on this event loop (a resumed run runs on it), and look for runs to resume from now on.

        Raises:
            ConfigError: another engine of this process has durable runs already.
        """
        global _active
        if _active is not None:
            raise ConfigError("META_AGENT_DATABASE_URL: one engine per process can have durable runs")
        _registered()  # before the launch, which may resume runs
        from dbos import DBOS

        DBOS(
            config={
                "name": "meta-agent",
                "system_database_url": self.url,
                "executor_id": self.replica,
                "application_version": self.version,
                "log_level": "WARNING",
            }
        )
        route_through_ours("dbos")  # DBOS's lines (tracebacks of an outage) as ours, one JSON line each, not its own
        logging.getLogger("dbos").addFilter(without_traceback)
        try:
            DBOS.launch()
        except BaseException:
            DBOS.destroy()
            raise
        self._body = body
        _active = self
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

    async def run(self, run_id: str, spec: Any, caller: Any) -> Any:
        """Run `spec` as the durable run `run_id`, here and now (cancelling the caller cancels it)."""
        from dbos import SetWorkflowID

        self._callers[run_id] = caller
        try:
            with SetWorkflowID(run_id):
                return await _registered()(spec)
        except Lost as lost:
            log.warning("run_lost", run_id=run_id, error=summary(lost.error))
            raise RunLost(run_id, lost.error) from None
        except anyio.get_cancelled_exc_class():
            if not stopping():  # its caller cancelled it: DBOS must not resume it either
                with anyio.CancelScope(shield=True):
                    await _cancelled(run_id)
            raise
        finally:
            self._callers.pop(run_id, None)

    async def body_of(self, spec: Any) -> Any:
        """The body of the run workflow: with its caller when it was started here, else resumed (no caller)."""
        from dbos import DBOS

        run_id = DBOS.workflow_id
        assert self._body is not None and run_id is not None
        caller = self._callers.pop(run_id, None)  # its first execution's: one DBOS starts again here has none
        if caller is not None:
            return await unwrapped(self._body(spec, caller), has_caller=True)
        task = asyncio.current_task()
        assert task is not None
        self._resumed[task] = run_id
        log.info("run_resumed", run_id=run_id)
        try:
            return await unwrapped(self._body(spec, None), has_caller=False)
        finally:
            del self._resumed[task]

    def steps(self, *, can_ask: bool) -> RunSteps:
        """The steps of the run being run now (call within its body)."""
        return RunSteps(can_ask=can_ask)

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
        who runs it: the replica that took it from its queue)."""
        from dbos import DBOS

        try:
            status = await DBOS.get_workflow_status_async(run_id)
            if status is None:  # its replica died before the run's first record
                await self.index.given_up(run_id, "interrupted before it started; it was not resumed")
                return
            if status.app_version not in (None, self.version):  # a replica of that version may take it (a deploy)
                await self.index.release(run_id)
                if run_id not in self._other_versions:
                    self._other_versions.add(run_id)
                    log.info("run_left", run_id=run_id, version=status.app_version)
                return
            # PENDING: `replica` ran it, or another replica took it from DBOS's queue and stopped before the run's
            # first write named it here (that write comes first, and the row was marked for a whole span since)
            if status.status == "PENDING":
                await self._hand_on(run_id, status.executor_id)
            # ENQUEUED: DBOS gives it to a replica; ended: its row was left behind, its record says how it ended
            elif status.status in ("SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"):
                await self.index.given_up(run_id, f"interrupted; its durable record says {status.status.lower()}")
        except Exception as exc:  # the next look tries again: the row's mark lapses again
            log.warning("run_not_resumed", run_id=run_id, error=f"{type(exc).__name__}: {exc}")

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
        why = f"given up after {plural(self.max_resumes, 'resumption')}; it was in {doing or 'its first step'}"
        await DBOS.cancel_workflow_async(run_id)  # DBOS never resumes it again
        await self.index.given_up(run_id, why)
        log.warning("run_given_up", run_id=run_id, why=why)

    def noting(self, run_id: str) -> Emit:
        """A sink of the run's events that notes in the run index the step it is in, for `_hand_on` to say."""

        async def note(event: Event) -> None:
            match event:
                case ModelTurnStarted(step=step):
                    await self.index.doing(run_id, f"step {step} (model)")
                case ToolCallStarted(step=step, name=name):
                    await self.index.doing(run_id, f"step {step} ({name})")

        return note


async def _cancelled(run_id: str) -> None:
    from dbos import DBOS

    try:
        await DBOS.cancel_workflow_async(run_id)
    except Exception as exc:  # its row says `done` (cancelled): no replica resumes it anyway
        log.warning("run_not_marked_cancelled", run_id=run_id, error=f"{type(exc).__name__}: {exc}")


class RunSteps:
    """One durable run's steps: wrappers of its model(s), tool runner and approver whose calls are checkpointed."""

    def __init__(self, *, can_ask: bool) -> None:
        self.can_ask = can_ask  # the caller that started the run could be asked (a resumed run keeps that)
        self._drawn: list[_Drawn] = []  # the latest model turn's calls, in its order, with their step numbers
        self._in_tool_calls = 0  # tool steps under way: a model asked meanwhile is a tool's (describe_image)

    async def once(self, name: str, work: Callable[..., Any], *args: Any) -> Any:
        """`work(*args)` as a step: run once; a replay gets its outcome back."""
        from dbos import DBOS

        return await DBOS.run_step_async({"name": name}, work, *args)

    def model(self, provider: Provider) -> Provider:
        return _Model(provider, self)

    def tools(self, runner: ToolRunner) -> ToolRunner:
        return _Tools(runner, self)

    def approver(self, approver: Approver | None) -> Approver | None:
        """The run's approver; None where its caller could not be asked (then such calls are refused, as always)."""
        return _Approvals(approver, self) if self.can_ask else None

    def draw(self, calls: Sequence[ToolCall]) -> None:
        """Draw the step numbers of a model turn's calls, in the order the model gave them."""
        from dbos import DBOS

        self._drawn = [_Drawn(call, DBOS.reserve_step(), DBOS.reserve_step()) for call in calls]

    async def call_step(self, call_id: str, name: str, work: Callable[..., Awaitable[T]], *args: Any, **kw: Any) -> T:
        from dbos import DBOS

        drawn = next((d for d in self._drawn if d.call.id == call_id and d.step is not None), None)
        self._in_tool_calls += 1
        try:
            if drawn is None:  # a call the latest model turn did not give (none does today): the next step number
                return await DBOS.run_step_async({"name": name}, work, *args, **kw)  # type: ignore[call-overload,no-any-return]
            step, drawn.step = drawn.step, None
            return await step.run_async({"name": name}, work, *args, **kw)  # type: ignore[no-any-return]
        finally:
            self._in_tool_calls -= 1

    @property
    def in_tool_call(self) -> bool:
        return self._in_tool_calls > 0

    async def approval_step(self, spec: ToolSpec, arguments: Mapping[str, Any], decide: Callable[[], Any]) -> Verdict:
        """The approval of the latest model turn's first call of `spec` with `arguments` whose approval is not drawn
        yet (calls that alike are interchangeable)."""
        for drawn in self._drawn:
            call = drawn.call
            if call.name == spec.alias and call.arguments == arguments and drawn.approval is not None:
                approval, drawn.approval = drawn.approval, None
                return await approval.run_async({"name": f"approval {spec.name}"}, decide)  # type: ignore[no-any-return]
        return await self.once(f"approval {spec.name}", decide)  # type: ignore[no-any-return]


@dataclass
class _Drawn:
    """A call of a model turn and the step numbers drawn for it (None once used): its approval's, its own."""

    call: ToolCall
    approval: Any
    step: Any


class _Model:
    """A model whose every answer is a step; the answer's tool calls get their step numbers at once."""

    def __init__(self, inner: Provider, steps: RunSteps) -> None:
        self.inner = inner
        self.steps = steps

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def accepts_images(self) -> bool:
        return self.inner.accepts_images

    async def aclose(self) -> None:  # the engine owns the model
        return None

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if self.steps.in_tool_call:  # a tool asking the run's model (describe_image): within that tool's step
            return await self.inner.complete(request)
        response: ModelResponse = await self.steps.once(f"model {self.inner.name}", self.inner.complete, request)
        self.steps.draw(response.tool_calls)
        return response


class _Tools:
    def __init__(self, inner: ToolRunner, steps: RunSteps) -> None:
        self.inner = inner
        self.steps = steps

    async def call(
        self,
        spec: ToolSpec,
        arguments: Mapping[str, Any],
        on_progress: ProgressFn | None = None,
        *,
        context: RunContext,
    ) -> ToolOutcome:
        if spec.internal and spec.name in REPLAYED:
            return await self.inner.call(spec, arguments, on_progress, context=context)
        return await self.steps.call_step(
            context.call_id, f"tool {spec.name}", self.inner.call, spec, arguments, on_progress, context=context
        )


class _Approvals:
    """The decision on a call, whether remembered from earlier or asked, is one step: a replay gets the same one, on
    any replica, with or without its caller, and reports no question (only a decision made now that asks the user
    does). A tool the user allowed for the rest of the run stays allowed after a resume: the verdict that said so
    is replayed too."""

    def __init__(self, inner: Approver | None, steps: RunSteps) -> None:
        self.inner = inner
        self.steps = steps
        self._for_run: set[str] = set()  # the tools allowed for the rest of the run, replayed or answered now

    def remembered(self, spec: ToolSpec) -> str | None:
        return None  # answered in `decide`, within its step

    async def ask(self, spec: ToolSpec, arguments: Mapping[str, Any]) -> Verdict:
        return await self.decide(spec, arguments, _say_nothing)

    async def decide(self, spec: ToolSpec, arguments: Mapping[str, Any], asking: Asking) -> Verdict:
        inner, for_run = self.inner, self._for_run

        async def decide_now() -> Verdict:
            if spec.name in for_run:
                return Verdict(True, "already allowed for the rest of this run")
            if inner is None:
                return Verdict(False, NOBODY_TO_ASK)
            if (allowed_for := inner.remembered(spec)) is not None:
                return Verdict(True, f"already allowed {allowed_for}")
            await asking()
            return await inner.ask(spec, arguments)

        verdict = await self.steps.approval_step(spec, arguments, decide_now)
        if verdict.for_run:
            for_run.add(spec.name)
        return verdict


async def _say_nothing() -> None:
    return None
