"""The one loop: model turn, tool calls, repeat, within limits; every step an event.

Each model turn ends in a small tagged value (`Answer`, `CallTools` or `OutOfTime`) and the loop branches on it.
A tool failure of any kind goes back to the model as an error result and the run goes on; a limit leads to one
last turn without tools; cancellation and provider errors end the run.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, assert_never

import anyio
import structlog
from ulid import ULID

from meta_agent import calls
from meta_agent import events as ev
from meta_agent.calls import Approver, bounded
from meta_agent.errors import ChildTimeout, LimitExceeded, MetaAgentError, summary
from meta_agent.events import Mode, RunResult, RunUsage, StepRecord, StopReason, ToolCallRecord
from meta_agent.limits import Limits
from meta_agent.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    ModelRequest,
    TextPart,
    ToolCall,
    ToolMessage,
    ToolResult,
    ToolSchema,
    Usage,
    UserMessage,
)
from meta_agent.providers import Provider
from meta_agent.tools import ProgressFn, ToolOutcome, ToolSpec

log = structlog.get_logger("meta_agent.loop")
T = TypeVar("T")

# Hosts reset their request timeout on progress; a beat this often keeps a slow call alive.
HEARTBEAT_INTERVAL = 10.0
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
ASK_RUNS_ONE = "not run: ask runs one tool call, the first one asked for"
FINAL_TURN = (
    "Stop here: {why}. Do not call any tool. Give your best final answer from what you have gathered so far, and "
    "say briefly what is left undone."
)

Emit = Callable[[ev.Event], Awaitable[None]]


class ToolRunner(Protocol):
    async def call(
        self, spec: ToolSpec, arguments: Mapping[str, Any], on_progress: ProgressFn | None = None
    ) -> ToolOutcome: ...


@dataclass(frozen=True, kw_only=True)
class RunRequest:
    task: str
    mode: Mode
    tools: tuple[ToolSpec, ...]  # already selected for the mode and the caller's patterns
    limits: Limits = field(default_factory=Limits)
    history: tuple[Message, ...] = ()
    run_id: str = field(default_factory=lambda: str(ULID()))
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS


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


Turn = Answer | CallTools | OutOfTime


async def _ignore(_event: ev.Event) -> None:
    return None


async def run(
    request: RunRequest,
    *,
    provider: Provider,
    tools: ToolRunner,
    emit: Emit = _ignore,
    approver: Approver | None = None,
    heartbeat_interval: float = HEARTBEAT_INTERVAL,
    checks: calls.ArgumentCheck | None = None,
) -> RunResult:
    """Run one task to an answer.

    Raises:
        ProviderError: the model provider failed (after a `RunFailed` event whose result has stop reason `error`).
        Cancellation: re-raised after a `RunFinished` event with stop reason `cancelled`.
    """
    return await _Run(request, provider, tools, emit, approver, heartbeat_interval, checks).go()


class _Turn:
    """One call's place in a per-server queue: entering waits for the call before it to finish."""

    def __init__(self, before: anyio.Event | None) -> None:
        self._before = before
        self.done = anyio.Event()

    def next(self) -> _Turn:
        return _Turn(self.done)

    async def __aenter__(self) -> None:
        if self._before is not None:
            await self._before.wait()

    async def __aexit__(self, *exc_info: object) -> None:
        self.done.set()


class _Run:
    def __init__(
        self,
        request: RunRequest,
        provider: Provider,
        tools: ToolRunner,
        emit: Emit,
        approver: Approver | None,
        heartbeat_interval: float,
        checks: calls.ArgumentCheck | None,
    ) -> None:
        self.request = request
        self.provider = provider
        self.tools = tools
        self.emit = emit
        self.approver = approver
        self.pulse = calls.Pulse(heartbeat_interval, self._beat)
        self.by_alias = {spec.alias: spec for spec in request.tools}
        self.schemas = tuple(
            ToolSchema(name=spec.alias, description=spec.description, parameters=spec.input_schema)
            for spec in request.tools
        )
        self.arguments = checks or calls.ArgumentCheck()
        self.transcript: list[Message] = [*request.history, UserMessage.of(request.task)]
        self.usage = Usage()
        self.model_calls = 0
        self.steps: list[StepRecord] = []
        self.images: list[ImagePart] = []
        self.limits_hit = 0
        self.started = anyio.current_time()

    async def go(self) -> RunResult:
        request = self.request
        await self.emit(
            ev.RunStarted(
                run_id=request.run_id,
                mode=request.mode,
                task=request.task,
                model=self.provider.name,
                tools=tuple(spec.name for spec in request.tools),
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
        await self.emit(ev.RunFailed(run_id=self.request.run_id, error=error, result=result))

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
                    unrun = tuple(self._refused(call, ASK_RUNS_ONE, "limit")[0] for call in calls[1:])
                    self.transcript[-1] = ToolMessage(results=(*results, *unrun))
                    return self._result("\n\n".join(filter(None, (text, results[0].text))), "final")
                case CallTools(calls=calls):
                    await self._run_tools(calls)
                case OutOfTime():
                    continue  # the check above ends the run
                case unreachable:
                    assert_never(unreachable)

    async def _last_turn(self, limit: LimitExceeded) -> RunResult:
        await self.emit(ev.LimitReached(step=len(self.steps), limit=limit.reason))  # type: ignore[arg-type]
        self.transcript.append(UserMessage.of(FINAL_TURN.format(why=limit)))
        turn = await self._model_turn(final=True)
        text = turn.text if isinstance(turn, (Answer, CallTools)) else ""
        self.transcript.append(AssistantMessage(text=text))
        return self._result(text or f"(no answer: {limit})", limit.reason)  # type: ignore[arg-type]

    async def _model_turn(self, *, final: bool) -> Turn:
        step = len(self.steps) + 1
        await self.emit(ev.ModelTurnStarted(step=step, final=final))
        model_request = ModelRequest(
            system=SYSTEM_PROMPTS[self.request.mode],
            messages=tuple(self.transcript),
            tools=self.schemas,
            tool_choice="none" if final else "auto",
        )
        started = time.perf_counter()
        # The last turn is not cut by the deadline: it is what makes a run end with an answer.
        deadline = float("inf") if final else self._deadline()
        await self.emit(ev.ModelRequested(step=step, request=model_request))
        with anyio.move_on_at(deadline):
            response = bounded(await self._beating(step, "model", self.provider.complete(model_request)))
            self.model_calls += 1
            self.usage += response.usage
            for part in response.thinking:
                if part.text:
                    await self.emit(ev.Thinking(step=step, text=part.text))
            calls = () if final else response.tool_calls
            await self.emit(
                ev.ModelResponded(
                    step=step,
                    text=response.text,
                    tool_calls=tuple(self._name_of(call.name) for call in calls),
                    input_tokens=response.usage.input_tokens,
                    output_tokens=response.usage.output_tokens,
                    duration_ms=_ms_since(started),
                    response=response,
                )
            )
            if final:
                self.steps.append(StepRecord(index=step))
                return Answer(response.text)
            self.transcript.append(response.as_message())
            if not calls:
                self.steps.append(StepRecord(index=step))
                return Answer(response.text)
            return CallTools(response.text, calls)
        return OutOfTime()

    async def _run_tools(self, calls: tuple[ToolCall, ...]) -> list[ToolResult]:
        """Run one step's calls concurrently (mutating calls one at a time per server); results in call order."""
        step = len(self.steps) + 1
        allowed = self.request.limits.max_tool_calls_per_step
        results: list[ToolResult | None] = [None] * len(calls)
        records: list[ToolCallRecord | None] = [None] * len(calls)
        turns = self._turns(calls[:allowed])
        for index, call in enumerate(calls[allowed:], start=allowed):
            refusal = f"not run: at most {allowed} tool calls per step; call it again in the next step"
            results[index], records[index] = self._refused(call, refusal, "limit")
        jobs = [(step, call, index, results, records, turns[index]) for index, call in enumerate(calls[:allowed])]
        with anyio.move_on_at(self._deadline()):
            if len(jobs) == 1:  # the common case needs no task of its own
                await self._call_one(*jobs[0])
            else:
                async with anyio.create_task_group() as tg:
                    for job in jobs:
                        tg.start_soon(self._call_one, *job)
        for index, call in enumerate(calls):
            if results[index] is None:
                results[index], records[index] = self._refused(call, "cancelled: the run's time limit passed", "limit")
        done = [result for result in results if result is not None]
        self.transcript.append(ToolMessage(results=tuple(done)))
        self.steps.append(StepRecord(index=step, tool_calls=tuple(r for r in records if r is not None)))
        return done

    async def _call_one(
        self,
        step: int,
        call: ToolCall,
        index: int,
        results: list[ToolResult | None],
        records: list[ToolCallRecord | None],
        turn: _Turn,
    ) -> None:
        name = self._name_of(call.name)
        async with turn:  # a call that may change things waits for the ones the model asked for before it
            started = time.perf_counter()
            try:
                await self.emit(ev.ToolCallStarted(step=step, call_id=call.id, name=name, arguments=call.arguments))
                full = await self._outcome(step, call)
            except Exception as exc:  # a bug of ours must cost one call, not the run; the model is told, we log it
                log.exception("tool_call_failed", tool=name, run_id=self.request.run_id)
                full = calls.error(f"{name} could not be run: {type(exc).__name__}: {exc}")
        spec = self.by_alias.get(call.name)
        if spec is not None and spec.internal:  # images an internal tool made (image_gen) go to the host
            self.images.extend(part for part in full.parts if isinstance(part, ImagePart))
        outcome = calls.for_model(
            full, accepts_images=self.provider.accepts_images, max_chars=self.request.max_result_chars
        )
        duration = _ms_since(started)
        error = outcome.parts[0].text if outcome.is_error and isinstance(outcome.parts[0], TextPart) else None
        results[index] = ToolResult(call_id=call.id, name=call.name, parts=outcome.parts, is_error=outcome.is_error)
        records[index] = ToolCallRecord(
            name=name,
            arguments=call.arguments,
            ok=not outcome.is_error,
            duration_ms=duration,
            error=error,
            error_kind=(outcome.error_kind or "tool") if outcome.is_error else None,
        )
        await self.emit(
            ev.ToolCallFinished(
                step=step,
                call_id=call.id,
                name=name,
                ok=not outcome.is_error,
                duration_ms=duration,
                error=error,
                result=outcome.parts,
                full_result=full.parts,
            )
        )

    async def _outcome(self, step: int, call: ToolCall) -> ToolOutcome:
        """Check, approve and run one call; every failure becomes an error outcome for the model."""
        spec = self.by_alias.get(call.name)
        if spec is None:
            known = ", ".join(sorted(self.by_alias)) or "none"
            return calls.error(f"unknown tool {call.name!r}; the tools are: {known}")
        if call.invalid_arguments:
            return calls.error(f"the arguments for {spec.alias} were {call.invalid_arguments}; send a JSON object")
        problem = self.arguments.problem(spec, call.arguments)
        if problem:
            return calls.error(f"invalid arguments for {spec.alias}: {problem}")
        why_not = calls.blocked(spec, self.request.mode, self.approver)
        if why_not:
            return calls.error(why_not, "approval")
        if calls.needs_approval(spec, self.request.mode):
            verdict = await self._approval(step, call, spec)
            if not verdict.allowed:
                return calls.error(calls.refusal(spec, verdict), "approval")

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            await self.emit(
                ev.ChildProgress(
                    step=step, call_id=call.id, name=spec.name, progress=progress, total=total, message=message
                )
            )

        try:
            outcome = await self._beating(step, spec.name, self.tools.call(spec, call.arguments, on_progress))
        except MetaAgentError as exc:
            return calls.error(str(exc), "timeout" if isinstance(exc, ChildTimeout) else "tool")
        except Exception as exc:  # a bug in an internal tool must not end the run; the model is told, we log it
            log.exception("tool_crashed", tool=spec.name, run_id=self.request.run_id)
            return calls.error(f"{spec.name} failed: {type(exc).__name__}: {exc}")
        return outcome

    async def _approval(self, step: int, call: ToolCall, spec: ToolSpec) -> calls.Verdict:
        """Ask the user (unless already allowed for the session); both the question and the answer are events."""
        assert self.approver is not None  # calls.blocked refused the call otherwise
        if self.approver.remembered(spec):
            verdict = calls.Verdict(True, "already allowed for this session")
        else:
            await self.emit(ev.ApprovalRequested(step=step, call_id=call.id, name=spec.name, arguments=call.arguments))
            verdict = await self._beating(step, "the user's answer", self.approver.ask(spec, call.arguments))
        await self.emit(
            ev.ApprovalAnswered(
                step=step, call_id=call.id, name=spec.name, allowed=verdict.allowed, answer=verdict.answer
            )
        )
        return verdict

    def _turns(self, step_calls: tuple[ToolCall, ...]) -> list[_Turn]:
        """Each call's turn: calls that may change things wait, per server, for the earlier such calls of the step,
        so they run (and are asked about) in the order the model gave; read-only and internal calls never wait."""
        last: dict[str, _Turn] = {}
        turns: list[_Turn] = []
        for call in step_calls:
            spec = self.by_alias.get(call.name)
            if spec is None or spec.hints.read_only or spec.server is None:
                turns.append(_Turn(None))
                continue
            previous = last.get(spec.server)
            last[spec.server] = previous.next() if previous else _Turn(None)
            turns.append(last[spec.server])
        return turns

    async def _beating(self, step: int, waiting_for: str, work: Awaitable[T]) -> T:
        """Await `work`; while it runs longer than the heartbeat interval, a heartbeat event repeats."""
        return await self.pulse.wait(step, waiting_for, work)

    async def _beat(self, step: int, waiting_for: str, elapsed: float) -> None:
        await self.emit(ev.Heartbeat(step=step, waiting_for=waiting_for, elapsed_s=elapsed))

    def _refused(self, call: ToolCall, why: str, kind: str) -> tuple[ToolResult, ToolCallRecord]:
        result = ToolResult(call_id=call.id, name=call.name, parts=(TextPart(text=why),), is_error=True)
        name = self._name_of(call.name)
        record = ToolCallRecord(
            name=name, arguments=call.arguments, ok=False, duration_ms=0, error=why, error_kind=kind
        )
        return result, record

    def _name_of(self, alias: str) -> str:
        spec = self.by_alias.get(alias)
        return spec.name if spec else alias

    def _elapsed(self) -> float:
        return anyio.current_time() - self.started

    def _deadline(self) -> float:
        limit = self.request.limits.time_limit
        return float("inf") if limit is None else self.started + limit

    def _metrics(self) -> RunUsage:
        calls = [call for step in self.steps for call in step.tool_calls]
        tool_ms: dict[str, int] = {}
        for call in calls:
            tool_ms[call.name] = tool_ms.get(call.name, 0) + call.duration_ms
        errors = dict(Counter(call.error_kind for call in calls if call.error_kind))
        if self.limits_hit:
            errors["limit"] = errors.get("limit", 0) + self.limits_hit
        return RunUsage(
            model_calls=self.model_calls,
            tool_calls=len(calls),
            input_tokens=self.usage.input_tokens,
            output_tokens=self.usage.output_tokens,
            duration_ms=round((anyio.current_time() - self.started) * 1000),
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
            images=tuple(self.images),
            transcript=tuple(self.transcript),
        )


def _ms_since(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)
