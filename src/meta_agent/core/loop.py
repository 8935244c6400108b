"""The one loop: model turn, tool calls, repeat, within limits; every step an event.

Each model turn ends in a small tagged value (`Answer`, `CallTools` or `OutOfTime`) and the loop branches on it.
A tool failure of any kind goes back to the model as an error result and the run goes on; a limit leads to one
last turn without tools; cancellation and provider errors end the run. How one step's tool calls run (queues per
server, approval, shaping results) is `tool_step`'s; the heartbeats of slow waits are `heartbeat`'s.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import assert_never

import anyio
from ulid import ULID

from meta_agent.core import events as ev
from meta_agent.core import tool_call
from meta_agent.core.code_mode import CodePlan, CodeRunner
from meta_agent.core.encodable import encodable
from meta_agent.core.events import Emit
from meta_agent.core.heartbeat import HEARTBEAT_INTERVAL, Pulse
from meta_agent.core.limits import Limits, clock, ms_since
from meta_agent.core.messages import (
    AssistantMessage,
    Message,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolMessage,
    ToolResult,
    ToolSchema,
    Usage,
    UserMessage,
)
from meta_agent.core.provider import Provider
from meta_agent.core.result import ErrorKind, Mode, RunResult, RunUsage, StepRecord, StopReason, UnavailableServer
from meta_agent.core.tool_call import Approver, bounded
from meta_agent.core.tool_search import SearchingRunner, SearchPlan, ToolSearch
from meta_agent.core.tool_step import ToolRunner, ToolStepRunner
from meta_agent.core.tools import FIND_TOOLS, RUN_CODE, ToolSpec
from meta_agent.errors import LimitExceeded, MetaAgentError, ProviderError, summary

# What the model sees of one tool result at most; the trace keeps the whole result.
DEFAULT_MAX_RESULT_CHARS = 50_000

SYSTEM_PROMPTS: dict[Mode, str] = {
    "agent": (
        "You are meta-agent, an agent that completes the user's task with the tools you are given. Call tools when "
        "they help; several independent calls may go in one turn. When the task is done, reply with the final "
        "answer and call no tool."
    ),
    "plan": (
        "You are meta-agent in planning mode. You may only use the read-only tools you are given, to look before "
        "you plan; change nothing. Reply with a numbered plan (1., 2., ...) of concrete steps, naming the tools "
        "that would carry each one out."
    ),
    "ask": "You are meta-agent. Answer the user directly. You may call one of the tools you are given if it helps.",
}
# What the model sees in code mode alone: run_code, find_tools where the run searches, and read_result, which reads a
# program's long output kept under a handle.
CODE_MODE_TOOLS = frozenset({RUN_CODE, FIND_TOOLS, tool_call.READ_RESULT})
ASK_RUNS_ONE = "not run: ask runs one tool call, the first one asked for"
FINAL_TURN = (
    "Stop here: {why}. Do not call any tool. Give your best final answer from what you have gathered so far, and "
    "say briefly what is left undone."
)


@dataclass(frozen=True, kw_only=True)
class RunRequest:
    task: str
    mode: Mode
    tools: tuple[ToolSpec, ...]  # already selected for the mode and the caller's patterns
    limits: Limits = field(default_factory=Limits)
    history: tuple[Message, ...] = ()
    run_id: str = field(default_factory=lambda: str(ULID()))
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS
    search: SearchPlan | None = None  # None: every tool's schema goes in every model request
    code: CodePlan | None = None  # None: no code mode (run_code is not among `tools`)
    # The run's clock: seconds of its time limit spent (a durable run's count from its first start, whichever process
    # started it); None: since this call of `run`.
    elapsed: Callable[[], float] | None = None
    # The servers whose tools the run could have used that were not ready: named at its start and in its result.
    unavailable_servers: tuple[UnavailableServer, ...] = ()


@dataclass(frozen=True)
class Answer:
    text: str


@dataclass(frozen=True)
class CallTools:
    text: str
    calls: tuple[ToolCall, ...]


@dataclass(frozen=True)
class OutOfTime:
    pass


# How a model turn ended; the loop branches on it.
ModelTurnEnd = Answer | CallTools | OutOfTime


async def _ignore(_event: ev.Event) -> None:
    return None


async def run(
    request: RunRequest,
    *,
    provider: Provider,
    fallbacks: Sequence[Provider] = (),
    tools: ToolRunner,
    emit: Emit = _ignore,
    approver: Approver | None = None,
    heartbeat_interval: float = HEARTBEAT_INTERVAL,
    checks: tool_call.ArgumentCheck | None = None,
) -> RunResult:
    """Run one task to an answer with `provider`; when it fails as a provider (`ProviderError.falls_back`), the
    same turn goes to the next of `fallbacks`, which the rest of the run keeps.

    Raises:
        ProviderError: the model provider failed, and no fallback was left (after a `RunFailed` event whose result
            has stop reason `error`).
        Cancellation: re-raised after a `RunFinished` event with stop reason `cancelled`.
    """
    return await _Run(request, (provider, *fallbacks), tools, emit, approver, heartbeat_interval, checks).go()


class _Run:
    def __init__(
        self,
        request: RunRequest,
        chain: tuple[Provider, ...],
        tools: ToolRunner,
        emit: Emit,
        approver: Approver | None,
        heartbeat_interval: float,
        checks: tool_call.ArgumentCheck | None,
    ) -> None:
        self.request = request
        self.chain = chain
        self.at = 0  # the model of the chain the run uses now: the first that has not failed
        self.emit = emit
        self.pulse = Pulse(heartbeat_interval, self._beat)
        self.search: ToolSearch | None = None
        if request.search is not None:  # the model sees find_tools, the pinned tools and what it found
            self.search = ToolSearch(request.tools, request.search.shown, request.history)
            tools = SearchingRunner(tools, request.search.finder, self.search)
        if request.code is not None:  # run_code runs programs, whose calls come back to the tool step
            tools = CodeRunner(tools, request.code.runner)
        self.tool_steps = ToolStepRunner(
            tools=request.tools,
            runner=tools,
            mode=request.mode,
            run_id=request.run_id,
            emit=emit,
            approver=approver,
            checks=checks or tool_call.ArgumentCheck(),
            pulse=self.pulse,
            model=lambda: self.provider,  # read at each call: a fallback may switch the run's model
            max_result_chars=request.max_result_chars,
            max_calls_per_step=request.limits.max_tool_calls_per_step,
            max_calls=request.limits.max_tool_calls,
            history=request.history,
        )
        self.transcript: list[Message] = [*request.history, UserMessage.of(request.task)]
        self.usage = Usage()
        self.model_calls: Counter[str] = Counter()  # by model
        self.steps: list[StepRecord] = []
        self.limits_hit = 0
        self.started = anyio.current_time()  # on the event loop's clock, as the deadline is
        self.clock_started = clock()

    async def go(self) -> RunResult:
        request = self.request
        await self.emit(
            ev.RunStarted(
                run_id=request.run_id,
                mode=request.mode,
                task=request.task,
                model=self.provider.name,
                fallbacks=tuple(provider.name for provider in self.chain[1:]),
                tools=tuple(spec.name for spec in request.tools),
                unavailable_servers=request.unavailable_servers,
                limits=request.limits,
            )
        )
        try:
            result = await self._steps_with_pulse()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await self.emit(ev.RunFinished(result=self._result("", "cancelled")))
            raise
        except Exception as exc:
            await self._failed(exc)
            raise
        await self.emit(ev.RunFinished(result=result))
        return result

    async def _failed(self, exc: Exception) -> None:
        """The run ends with stop reason `error`, its last event saying why: our one-line error (the provider's), or
        a bug of ours (its type and first line; the caller logs the traceback)."""
        error = str(exc) if isinstance(exc, MetaAgentError) else summary(exc)
        result = self._result(f"(no answer: {error})", "error")
        await self.emit(
            ev.RunFailed(run_id=self.request.run_id, error=error, result=result, error_type=type(exc).__name__)
        )

    async def _steps_with_pulse(self) -> RunResult:
        failure: Exception | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.pulse.run)
            try:
                result = await self._steps()
            except Exception as exc:  # raised again below, outside the task group, so it is not wrapped in a group
                failure = exc
            tg.cancel_scope.cancel()
        if failure is not None:
            raise failure
        return result

    async def _steps(self) -> RunResult:
        while True:
            try:
                self.request.limits.check(
                    steps_done=len(self.steps), tokens_used=self.usage.total, elapsed=self._elapsed()
                )
            except LimitExceeded as limit:
                self.limits_hit += 1
                return await self._last_turn(limit)
            match await self._model_turn(final=False):
                case Answer(text=text):
                    return self._result(text, "final")
                case CallTools(text=text, calls=calls) if self.request.mode == "ask":
                    # ask: at most one tool run, and its result is the answer; no second model turn. The calls not
                    # run are answered too, so the transcript stays one that providers accept when it is continued.
                    results = await self._run_tools(calls[:1])
                    unrun = tuple(self.tool_steps.refused(call, ASK_RUNS_ONE, "limit")[0] for call in calls[1:])
                    self.transcript[-1] = ToolMessage(results=(*results, *unrun))
                    return self._result("\n\n".join(filter(None, (text, results[0].text))), "final")
                case CallTools(calls=calls):
                    await self._run_tools(calls)
                case OutOfTime():
                    continue  # the check above ends the run
                case unreachable:
                    assert_never(unreachable)

    async def _last_turn(self, limit: LimitExceeded) -> RunResult:
        await self.emit(ev.LimitReached(step=len(self.steps), limit=limit.reason))
        self.transcript.append(UserMessage.of(FINAL_TURN.format(why=limit)))
        turn = await self._model_turn(final=True)
        text = turn.text if isinstance(turn, (Answer, CallTools)) else ""
        self.transcript.append(AssistantMessage(text=text))
        return self._result(text or f"(no answer: {limit})", limit.reason)

    async def _model_turn(self, *, final: bool) -> ModelTurnEnd:
        step = len(self.steps) + 1
        await self.emit(ev.ModelTurnStarted(step=step, final=final))
        model_request = ModelRequest(
            system=SYSTEM_PROMPTS[self.request.mode],
            messages=tuple(self.transcript),
            tools=self._schemas(),
            tool_choice="none" if final else "auto",
        )
        started = clock()
        # The last turn is not cut by the deadline: it is what makes a run end with an answer.
        deadline = float("inf") if final else self._deadline()
        await self.emit(ev.ModelRequested(step=step, request=model_request))
        with anyio.move_on_at(deadline):
            response = bounded(await self.pulse.wait(step, "model", self._complete(step, model_request)))
            self.model_calls[self.provider.name] += 1
            self.usage += response.usage
            for part in response.thinking:
                if part.text:
                    await self.emit(ev.Thinking(step=step, text=part.text))
            calls = () if final else response.tool_calls
            await self.emit(
                ev.ModelResponded(
                    step=step,
                    text=response.text,
                    tool_calls=tuple(self.tool_steps.name_of(call.name) for call in calls),
                    input_tokens=response.usage.input_tokens,
                    output_tokens=response.usage.output_tokens,
                    duration_ms=ms_since(started),
                    response=response,
                )
            )
            if final:
                self.steps.append(StepRecord(index=step, tool_calls=()))
                return Answer(response.text)
            self.transcript.append(response.as_message())
            if self.search is not None:  # a selected tool called unseen (known from earlier) is shown from now on
                self.search.called(call.name for call in calls)
            if not calls:
                self.steps.append(StepRecord(index=step, tool_calls=()))
                return Answer(response.text)
            return CallTools(response.text, calls)
        return OutOfTime()

    def _schemas(self) -> tuple[ToolSchema, ...]:
        """The tools of this model turn: every one, or with search on those shown so far."""
        shown = self.request.tools if self.search is None else self.search.shown()
        if self.request.code is not None and self.request.code.only:  # the program calls the rest
            shown = tuple(spec for spec in shown if spec.internal and spec.name in CODE_MODE_TOOLS)
        return tuple(
            ToolSchema(name=spec.alias, description=spec.description, parameters=spec.input_schema) for spec in shown
        )

    async def _complete(self, step: int, request: ModelRequest) -> ModelResponse:
        """One model call, by the run's model or, when that fails as a provider, by the next of the chain."""
        while True:
            try:
                return encodable(await self.provider.complete(request))  # no lone surrogate goes further
            except ProviderError as exc:
                if not exc.falls_back or self.at + 1 == len(self.chain):
                    raise
                following = self.chain[self.at + 1]
                await self.emit(
                    ev.ModelSwitched(
                        step=step,
                        failed=self.provider.name,
                        error=str(exc),
                        brief=exc.brief,
                        next=following.name,
                        error_type=type(exc).__name__,
                    )
                )
                self.at += 1

    async def _run_tools(self, calls: tuple[ToolCall, ...]) -> list[ToolResult]:
        """Run one step's calls; their results join the transcript and their records the run's steps."""
        results, record = await self.tool_steps.run_step(len(self.steps) + 1, calls, self._deadline())
        self.transcript.append(ToolMessage(results=tuple(results)))
        self.steps.append(record)
        return results

    @property
    def provider(self) -> Provider:
        """The model the run uses now."""
        return self.chain[self.at]

    async def _beat(self, step: int, waiting_for: str, elapsed: float) -> None:
        await self.emit(ev.Heartbeat(step=step, waiting_for=waiting_for, elapsed_s=elapsed))

    def _elapsed(self) -> float:
        if self.request.elapsed is not None:
            return self.request.elapsed()
        return anyio.current_time() - self.started

    def _deadline(self) -> float:
        """The time limit's end on the event loop's clock."""
        limit = self.request.limits.time_limit
        return float("inf") if limit is None else anyio.current_time() + limit - self._elapsed()

    def _metrics(self) -> RunUsage:
        calls = [call for step in self.steps for call in step.tool_calls]
        tool_ms: dict[str, int] = {}
        for call in calls:
            tool_ms[call.name] = tool_ms.get(call.name, 0) + call.duration_ms
        errors: dict[ErrorKind, int] = dict(Counter(call.error_kind for call in calls if call.error_kind))
        if self.limits_hit:
            errors["limit"] = errors.get("limit", 0) + self.limits_hit
        return RunUsage(
            model_calls=self.model_calls.total(),
            tool_calls=len(calls),
            input_tokens=self.usage.input_tokens,
            output_tokens=self.usage.output_tokens,
            reasoning_tokens=self.usage.reasoning_tokens,
            models=dict(self.model_calls),
            duration_ms=ms_since(self.clock_started),
            tool_ms=tool_ms,
            errors=errors,
        )

    def _result(self, answer: str, stop_reason: StopReason) -> RunResult:
        return RunResult(
            answer=answer,
            stop_reason=stop_reason,
            run_id=self.request.run_id,
            steps=tuple(self.steps),
            usage=self._metrics(),
            images=tuple(self.tool_steps.images.kept),
            images_left_out=self.tool_steps.images.left_out,
            transcript=tuple(self.transcript),
            unavailable_servers=self.request.unavailable_servers,
        )
