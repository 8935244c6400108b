"""One step's tool calls: run concurrently, each checked, approved if it must be, run and its result shaped for the
model; calls that may change things run one at a time per server, in the order the model gave. Every call is two
events and one record.

A failure of any kind, ours included, becomes an error result for the model, and the run goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, Protocol

import anyio
import structlog

from meta_agent.core import events as ev
from meta_agent.core import tool_call
from meta_agent.core.events import Emit
from meta_agent.core.heartbeat import Pulse
from meta_agent.core.inner_calls import InnerCalls
from meta_agent.core.limits import clock, ms_since
from meta_agent.core.messages import TOO_LARGE, ImagePart, Message, Part, TextPart, ToolCall, ToolResult
from meta_agent.core.provider import Provider
from meta_agent.core.result import ErrorKind, Mode, StepRecord, ToolCallRecord
from meta_agent.core.result_images import ResultImages
from meta_agent.core.tool_call import Approver, ArgumentCheck
from meta_agent.core.tools import FIND_TOOLS, RUN_CODE, ProgressFn, RunContext, ToolOutcome, ToolSpec
from meta_agent.errors import ChildTimeout, MetaAgentError

log = structlog.get_logger(__name__)


class ToolRunner(Protocol):
    """Runs one tool call: an internal tool, which may use the run's `context`, or a child server's."""

    async def call(
        self,
        spec: ToolSpec,
        arguments: Mapping[str, Any],
        on_progress: ProgressFn | None = None,
        *,
        context: RunContext,
    ) -> ToolOutcome: ...


class _ServerQueueSlot:
    """One call's place in its server's queue: entering waits until the calls before it have finished (a program's
    calls before it on every server)."""

    def __init__(self, *before: _ServerQueueSlot | None) -> None:
        self.done: anyio.Event = anyio.Event()
        self._before = tuple(slot.done for slot in before if slot is not None)

    async def __aenter__(self) -> None:
        for before in self._before:
            await before.wait()

    async def __aexit__(self, *exc_info: object) -> None:
        self.done.set()


class ToolStepRunner:
    """Runs the tool calls of each step of one run; what the calls share (tools, mode, approver, limits) is fixed
    for the run. Images that internal tools made (image_gen) gather in `images`, for the host, within the bounds of a
    result (meta_agent.core.result_images).

    Every image a tool result brings into the run gets a reference, `image-1`, `image-2`... counted on from those of
    the conversation's `history`, which the model sees next to it and can give an internal tool (describe_image) to
    point at it; `run_images` holds them. `model` gives the run's model as it is now (a fallback may switch it): it
    decides whether results carry images or placeholders, and internal tools may ask it.

    A result whose text is longer than `max_result_chars` is kept whole in `run_results` under a handle
    (`result-1@<end of the run id>`) when the run offers read_result: the model gets its head and the handle, and
    reads on with read_result. A run without read_result (ask, or a selector that leaves it out) cuts the text.
    """

    def __init__(
        self,
        *,
        tools: tuple[ToolSpec, ...],
        runner: ToolRunner,
        mode: Mode,
        run_id: str,
        emit: Emit,
        approver: Approver | None,
        checks: ArgumentCheck,
        pulse: Pulse,
        model: Callable[[], Provider],
        max_result_chars: int,
        max_calls_per_step: int,
        max_calls: int,
        history: Sequence[Message] = (),
    ) -> None:
        self.by_alias = {spec.alias: spec for spec in tools}
        self.runner = runner
        self.mode = mode
        self.run_id = run_id
        self.emit = emit
        self.approver = approver
        self.checks = checks
        self.pulse = pulse
        self.model = model
        self.max_result_chars = max_result_chars
        self.max_calls_per_step = max_calls_per_step
        self.max_calls = max_calls  # in the whole run, a program's calls included
        self.calls_made = 0
        self.inner = InnerCalls(tools, mode)  # the calls programs of the run made (code mode), with their records
        self.images = ResultImages()
        self.run_images, self._images_named = tool_call.earlier_images(history)
        self.run_results: dict[str, str] = {}
        self._answered_after: dict[str, float] = {}  # by call id: seconds the call waited for the user's answer
        # ask has no later turn to read in: its tool's result is the answer as it is.
        self._keeps = mode != "ask" and any(spec.internal and spec.name == tool_call.READ_RESULT for spec in tools)

    async def run_step(
        self, step: int, calls: tuple[ToolCall, ...], deadline: float
    ) -> tuple[list[ToolResult], StepRecord]:
        """Run one step's calls concurrently; results in call order. A call past the per-step limit is refused, and
        one still running at `deadline` is cancelled: both are error results too.

        The results are named (their images `image-N`, a long one's handle) in the order the model gave the calls,
        not the order they finish in, so a durable run's replay, whose calls finish in another order, names them as
        its first start did: a call's result is named, and its end reported, once the calls before it have ended."""
        allowed = self.max_calls_per_step
        done: dict[int, tuple[ToolResult, ToolCallRecord]] = {}
        for index, call in enumerate(calls[allowed:], start=allowed):
            refusal = f"not run: at most {allowed} tool calls per step; call it again in the next step"
            done[index] = self.refused(call, refusal, "limit")
        slots = self._queue_slots(calls[:allowed])
        ended: dict[int, tuple[ToolOutcome, int]] = {}  # the calls carried out, not yet named
        named = [0]  # the calls before this index are named

        async def call_one(index: int) -> None:
            ended[index] = await self._carry_out(step, calls[index], slots[index])
            while named[0] < len(slots) and named[0] in ended:  # this call, and those after it waiting for it
                next_index, named[0] = named[0], named[0] + 1
                await self._finish(step, calls[next_index], *ended.pop(next_index), done, next_index)

        with anyio.move_on_at(deadline):
            if len(slots) == 1:  # the common case needs no task of its own
                await call_one(0)
            else:
                async with anyio.create_task_group() as tg:
                    for index in range(len(slots)):
                        tg.start_soon(call_one, index)
        for index in sorted(ended):  # ended, but behind a call the deadline cancelled: they happened all the same
            await self._finish(step, calls[index], *ended.pop(index), done, index)
        late = "cancelled: the run's time limit passed"
        pairs = [done.get(index) or self.refused(call, late, "limit") for index, call in enumerate(calls)]
        # the calls a program made follow the record of the call that ran it
        records = tuple(rec for call, (_, own) in zip(calls, pairs, strict=True) for rec in self.inner.after(call, own))
        return [result for result, _ in pairs], StepRecord(index=step, tool_calls=records)

    async def _finish(
        self,
        step: int,
        call: ToolCall,
        full: ToolOutcome,
        duration_ms: int,
        done: dict[int, tuple[ToolResult, ToolCallRecord]],
        index: int,
    ) -> None:
        """Name the call's result, keep it in `done` and report its end."""
        handle = self._kept(call, full)
        result, record = done[index] = self._shaped(call, full, self._named(full), handle, duration_ms)
        await self.emit(_finished(step, call, record, duration_ms, result.parts, full, handle))

    def refused(self, call: ToolCall, why: str, kind: ErrorKind) -> tuple[ToolResult, ToolCallRecord]:
        """The error result and record of a call that was not run."""
        result = ToolResult(call_id=call.id, name=call.name, parts=(TextPart(text=why),), is_error=True)
        record = ToolCallRecord(
            name=self.name_of(call.name), arguments=call.arguments, ok=False, duration_ms=0, error=why, error_kind=kind
        )
        return result, record

    def name_of(self, alias: str) -> str:
        """The tool's full name for events and records; the model's alias if no tool has it."""
        spec = self.by_alias.get(alias)
        return spec.name if spec else alias

    def _queue_slots(self, step_calls: tuple[ToolCall, ...]) -> list[_ServerQueueSlot]:
        """Each call's slot: calls that may change things wait, per server, for the earlier such calls of the step,
        so they run (and are asked about) in the order the model gave; read-only and internal calls never wait. A
        program (run_code) may change things on any server: it waits for every such call before it, and every such
        call after it waits for it (so programs also run one after another, their calls in an order a durable run's
        replay keeps)."""
        last: dict[str, _ServerQueueSlot] = {}
        program: _ServerQueueSlot | None = None  # the step's latest program so far
        slots: list[_ServerQueueSlot] = []
        for call in step_calls:
            spec = self.by_alias.get(call.name)
            if spec is not None and spec.internal and spec.name == RUN_CODE:
                program = _ServerQueueSlot(program, *last.values())
                last.clear()
                slots.append(program)
            elif spec is not None and not spec.hints.read_only and spec.server is not None:
                last[spec.server] = _ServerQueueSlot(last.get(spec.server) or program)
                slots.append(last[spec.server])
            else:
                slots.append(_ServerQueueSlot())
        return slots

    async def _carry_out(
        self, step: int, call: ToolCall, slot: _ServerQueueSlot, within: str | None = None
    ) -> tuple[ToolOutcome, int]:
        """The call's whole outcome, and the milliseconds it took once its slot came; `within`: the call id of the
        program that makes it."""
        name, spec = self.name_of(call.name), self.by_alias.get(call.name)
        async with slot:  # a call that may change things waits for the ones the model asked for before it
            started = clock()
            try:
                server = spec.server if spec is not None else None
                await self.emit(
                    ev.ToolCallStarted(
                        step=step, call_id=call.id, name=name, arguments=call.arguments, server=server, within=within
                    )
                )
                full = await self._outcome(step, call)
            except Exception as exc:  # a bug of ours must cost one call, not the run; the model is told, we log it
                log.exception("tool_call_failed", tool=name, run_id=self.run_id)
                full = tool_call.error(f"{name} could not be run: {type(exc).__name__}: {exc}")
        if spec is not None and spec.internal:  # images an internal tool made (image_gen) go to the host
            for part in full.parts:
                if isinstance(part, ImagePart):
                    await self.images.add(part)
        # the call's time is the tool's: the user's answer is no part of it (a question may wait for minutes)
        return full, max(0, ms_since(started) - round(self._answered_after.pop(call.id, 0.0) * 1000))

    def _named(self, full: ToolOutcome) -> tuple[str, ...]:
        """The references of the images of a call's result, which join the run's images. `ask` names none: no later
        turn of its run could use them, and its tool's result is the answer as it is."""
        if self.mode == "ask":
            return ()
        refs: list[str] = []
        for image in (part for part in full.parts if isinstance(part, ImagePart)):
            self._images_named += 1
            refs.append(f"image-{self._images_named}")
            self.run_images[refs[-1]] = image
        return tuple(refs)

    def _kept(self, call: ToolCall, full: ToolOutcome) -> str | None:
        """The handle under which the run keeps the whole text of a result too long to give the model, or None (it
        fits, or the run has no read_result). read_result's own answers are never kept: they are bounded slices."""
        if not self._keeps or self.name_of(call.name) == tool_call.READ_RESULT:
            return None
        text = tool_call.kept_text(full)
        if len(text) <= self.max_result_chars:
            return None
        handle = tool_call.result_handle(len(self.run_results) + 1, self.run_id)
        self.run_results[handle] = text
        return handle

    def _shaped(
        self, call: ToolCall, full: ToolOutcome, image_refs: Sequence[str], handle: str | None, duration_ms: int
    ) -> tuple[ToolResult, ToolCallRecord]:
        """The result the model sees (its images named, or placeholders where the model cannot take them; long text
        kept under `handle`, its head shown, or cut where there is none) and the call's record."""
        # read_result bounds its own answers, which are never cut again (a low inline limit would make them unreadable).
        limit = len(tool_call.kept_text(full)) if self.name_of(call.name) == tool_call.READ_RESULT else None
        outcome = tool_call.for_model(
            full,
            accepts_images=self.model().accepts_images,
            max_chars=limit or self.max_result_chars,
            image_refs=image_refs,
            handle=handle,
        )
        error = outcome.parts[0].text if outcome.is_error and isinstance(outcome.parts[0], TextPart) else None
        result = ToolResult(call_id=call.id, name=call.name, parts=outcome.parts, is_error=outcome.is_error)
        record = ToolCallRecord(
            name=self.name_of(call.name),
            arguments=call.arguments,
            ok=not outcome.is_error,
            duration_ms=duration_ms,
            error=error,
            error_kind=(outcome.error_kind or "tool") if outcome.is_error else None,
        )
        return result, record

    async def _outcome(self, step: int, call: ToolCall) -> ToolOutcome:
        """Check, approve and run one call; every failure becomes an error outcome for the model."""
        spec = self.by_alias.get(call.name)
        if spec is None:
            if FIND_TOOLS in self.by_alias:  # with search on, the list could be hundreds of names long
                return tool_call.error(f"unknown tool {call.name!r}; find the tool you need with {FIND_TOOLS}")
            known = ", ".join(sorted(self.by_alias)) or "none"
            return tool_call.error(f"unknown tool {call.name!r}; the tools are: {known}")
        if call.invalid_arguments:
            advice = "send less" if call.invalid_arguments == TOO_LARGE else "send a JSON object"
            return tool_call.error(f"the arguments for {spec.alias} were {call.invalid_arguments}; {advice}")
        problem = await self.checks.checked(spec, call.arguments)
        if problem:
            return tool_call.error(f"invalid arguments for {spec.alias}: {problem}")
        why_not = tool_call.blocked(spec, self.mode, self.approver)
        if why_not:
            return tool_call.error(why_not, "approval")
        if tool_call.needs_approval(spec, self.mode):
            verdict = await self._approval(step, call, spec)
            if not verdict.allowed:
                return tool_call.error(tool_call.refusal(spec, verdict), "approval")

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            await self.emit(
                ev.ChildProgress(
                    step=step, call_id=call.id, name=spec.name, progress=progress, total=total, message=message
                )
            )

        if self.calls_made >= self.max_calls:
            return tool_call.error(f"not run: the run's limit of {self.max_calls} tool calls was reached", "limit")
        self.calls_made += 1
        # The run's images as they are when the call starts: a call of the same step may add more meanwhile.
        context = RunContext(
            model=self.model(),
            images=dict(self.run_images),
            results=dict(self.run_results),
            run_id=self.run_id,
            call_id=call.id,
            call_tool=partial(self.inner_call, step, call) if spec.internal else None,
        )
        try:
            outcome = await self.pulse.wait(
                step, spec.name, self.runner.call(spec, call.arguments, on_progress, context=context)
            )
        except MetaAgentError as exc:
            return tool_call.error(str(exc), "timeout" if isinstance(exc, ChildTimeout) else "tool")
        except Exception as exc:  # a bug in an internal tool must not end the run; the model is told, we log it
            log.exception("tool_crashed", tool=spec.name, run_id=self.run_id)
            return tool_call.error(f"{spec.name} failed: {type(exc).__name__}: {exc}")
        return outcome

    async def inner_call(self, step: int, program: ToolCall, name: Any, arguments: Any) -> ToolOutcome:
        """A call of the run's tool `name` with `arguments` that the call `program` (run_code) makes: checked,
        approved, run and reported as a call the model made itself, its record kept for the step's; never kept
        under a handle nor its images named, as the model sees only what the program makes of it."""
        call, refusal = self.inner.call_of(program, name, arguments)
        if refusal is not None:
            return refusal
        full, duration_ms = await self._carry_out(step, call, _ServerQueueSlot(), within=program.id)
        record = self.inner.record(program, call, self.name_of(call.name), full, duration_ms)
        await self.emit(_finished(step, call, record, duration_ms, full.parts, full))
        return full

    async def _approval(self, step: int, call: ToolCall, spec: ToolSpec) -> tool_call.Verdict:
        """Ask the user (unless it is allowed already, for longer than a call); both the question and the answer are
        events."""
        assert self.approver is not None  # tool_call.blocked refused the call otherwise
        started = clock()
        try:
            return await self._answer(step, call, spec)
        finally:
            self._answered_after[call.id] = clock() - started

    async def _answer(self, step: int, call: ToolCall, spec: ToolSpec) -> tool_call.Verdict:
        assert self.approver is not None

        async def asking() -> None:
            await self.emit(ev.ApprovalRequested(step=step, call_id=call.id, name=spec.name, arguments=call.arguments))

        if isinstance(self.approver, tool_call.DecidingApprover):
            deciding = self.approver.decide(spec, call.arguments, asking)
            verdict = await self.pulse.wait(step, "the user's answer", deciding)
        elif (allowed_for := self.approver.remembered(spec)) is not None:
            verdict = tool_call.Verdict(True, f"already allowed {allowed_for}")
        else:
            await asking()
            verdict = await self.pulse.wait(step, "the user's answer", self.approver.ask(spec, call.arguments))
        await self.emit(
            ev.ApprovalAnswered(
                step=step, call_id=call.id, name=spec.name, allowed=verdict.allowed, answer=verdict.answer
            )
        )
        return verdict


def _finished(
    step: int,
    call: ToolCall,
    record: ToolCallRecord,
    duration_ms: int,
    shown: tuple[Part, ...],
    full: ToolOutcome,
    kept: str | None = None,
) -> ev.ToolCallFinished:
    """The event of a call's end: what the model was shown of its result (`shown`), all of it, and its handle."""
    return ev.ToolCallFinished(
        step=step,
        call_id=call.id,
        name=record.name,
        ok=record.ok,
        duration_ms=duration_ms,
        error=record.error,
        result=shown,
        full_result=full.parts,
        kept=kept,
    )
