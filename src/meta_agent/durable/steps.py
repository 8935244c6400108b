"""A durable run's steps (durable/runs.py): its model turns, tool calls and approvals wrapped so that each is a
DBOS step, recorded once and given back by a replay, and the clock the run's time limit is counted on.

Steps run one after another, except the tool calls of one model turn, which run concurrently: their step numbers are
drawn in the order the model gave them, as soon as its answer is known, so each call meets its own record however the
calls interleave. find_tools and read_result are no steps: they only read the run's own state, which replay rebuilds.
Nor is run_code (code mode), which the loop runs before a call reaches this runner (core/code_mode.py): a replay runs
its program again, and each call the program makes is a step of its own, approval included, numbered on after the
turn's drawn numbers (programs of a turn run one after another, so their calls come in one order), whose record the
replayed program is given back; a program is deterministic given those answers (internal/sandbox.py).

dbos is imported only on first use (with a PostgreSQL database).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from meta_agent.core.code_mode import in_program
from meta_agent.core.messages import ModelRequest, ModelResponse, ToolCall
from meta_agent.core.provider import Provider, WrappedProvider
from meta_agent.core.tool_call import READ_RESULT, Approver, Asking, Verdict
from meta_agent.core.tool_step import ToolRunner
from meta_agent.core.tools import FIND_TOOLS, ProgressFn, RunContext, ToolOutcome, ToolSpec

T = TypeVar("T")
NOBODY_TO_ASK = "not run: the run was resumed after its replica stopped, and nobody is left to ask for approval"
# Tools whose calls are no steps: they read only the run's own state, which a replay rebuilds.
REPLAYED = frozenset({FIND_TOOLS, READ_RESULT})


class RunSteps:
    """One durable run's steps: wrappers of its model(s), tool runner and approver whose calls are checkpointed, and
    the run's clock (`elapsed`)."""

    def __init__(
        self, *, can_ask: bool, started: float | None = None, recorded: Sequence[float] = (), resumed: bool = False
    ) -> None:
        """`started`: when the run first started (seconds since the epoch; None: now, a run that starts now).
        `recorded`: when each step of its record ended, for a run resumed with a record to replay. `resumed`: an
        execution after the first, which may have left rows (its events) behind."""
        self.can_ask = can_ask  # the caller that started the run could be asked (a resumed run keeps that)
        self.resumed = resumed
        self._drawn: list[_Drawn] = []  # the latest model turn's calls, in its order, with their step numbers
        self._in_tool_calls = 0  # tool steps under way: a model asked meanwhile is a tool's (describe_image)
        self._started = time.time() if started is None else started
        self._recorded = sorted(recorded)
        self._replayed = 0  # the steps the record gave back so far
        self._live = not self._recorded  # a step has run here, not from the record: the clock is the wall's

    def elapsed(self) -> float:
        """Seconds of the run's time limit spent, counted from its first start: a resumed run gets no fresh clock.
        While the run replays its record, the time as it was when the step replayed last had ended, so that the
        replay meets the limit no earlier than the first execution did; then the wall clock's, downtime included."""
        if self._live or self._replayed >= len(self._recorded):
            return time.time() - self._started
        return self._recorded[self._replayed - 1] - self._started if self._replayed else 0.0

    async def once(self, name: str, work: Callable[..., Any], *args: Any) -> Any:
        """`work(*args)` as a step: run once; a replay gets its outcome back."""
        from dbos import DBOS

        return await self._counted(lambda live: DBOS.run_step_async({"name": name}, live, *args), work)

    async def _counted(self, step: Callable[[Callable[..., Any]], Awaitable[T]], work: Callable[..., Any]) -> T:
        """`step(live)`, where `live` is `work` noting that it ran: a step whose work did not run was replayed."""
        ran = False
        live: Callable[..., Any]
        if inspect.iscoroutinefunction(work):

            async def live(*args: Any, **kwargs: Any) -> Any:
                nonlocal ran
                ran = True
                return await work(*args, **kwargs)
        else:

            def live(*args: Any, **kwargs: Any) -> Any:
                nonlocal ran
                ran = True
                return work(*args, **kwargs)

        try:
            return await step(live)
        finally:
            if ran:
                self._live = True
            else:
                self._replayed += 1

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
                return await self._counted(lambda live: DBOS.run_step_async({"name": name}, live, *args, **kw), work)
            step, drawn.step = drawn.step, None
            return await self._counted(lambda live: step.run_async({"name": name}, live, *args, **kw), work)
        finally:
            self._in_tool_calls -= 1

    @property
    def in_tool_call(self) -> bool:
        return self._in_tool_calls > 0

    async def approval_step(self, spec: ToolSpec, arguments: Mapping[str, Any], decide: Callable[[], Any]) -> Verdict:
        """The approval of the latest model turn's first call of `spec` with `arguments` whose approval is not drawn
        yet (calls that alike are interchangeable); within a program, the next step."""
        for drawn in () if in_program() else self._drawn:  # a program's calls were not drawn: numbered on
            call = drawn.call
            if call.name == spec.alias and call.arguments == arguments and drawn.approval is not None:
                approval, drawn.approval = drawn.approval, None
                return await self._counted(partial(approval.run_async, {"name": f"approval {spec.name}"}), decide)
        return await self.once(f"approval {spec.name}", decide)  # type: ignore[no-any-return]


@dataclass
class _Drawn:
    """A call of a model turn and the step numbers drawn for it (None once used): its approval's, its own."""

    call: ToolCall
    approval: Any
    step: Any


class _Model(WrappedProvider):
    """A model whose every answer is a step; the answer's tool calls get their step numbers at once."""

    def __init__(self, inner: Provider, steps: RunSteps) -> None:
        super().__init__(inner)
        self.steps = steps

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
