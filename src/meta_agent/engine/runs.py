"""Run orchestration: one run of the loop from a caller's arguments, within its turn of the conversation, recorded as
it goes (its trace, the run index, telemetry) and remembered once it ends (the conversation saved).

With PostgreSQL a run is durable (durable/runs.py): this module's `Runs.body` is what DBOS runs, again on whichever
replica resumes it; each model turn, tool call and approval is then one of its steps.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import structlog
from ulid import ULID

from meta_agent.children.questions import Questions
from meta_agent.config.settings import Settings
from meta_agent.core import events as ev
from meta_agent.core.code_mode import code_on
from meta_agent.core.event_lines import describe
from meta_agent.core.events import Emit, Event
from meta_agent.core.limits import DEFAULT_PLAN_STEPS, Limits
from meta_agent.core.loop import RunRequest, run
from meta_agent.core.provider import Provider
from meta_agent.core.result import Mode, RunResult, unavailable_line
from meta_agent.core.run_spec import RunSpec
from meta_agent.core.tool_call import Approver, ArgumentCheck
from meta_agent.core.tool_step import ToolRunner
from meta_agent.errors import ConfigError, ConversationLost
from meta_agent.providers.chain import ModelChain
from meta_agent.records.metrics import Metrics
from meta_agent.records.run_feed import RunFeed
from meta_agent.records.telemetry import Spans, current_trace_context, parent_context
from meta_agent.records.traces import Redactor, TraceWriter
from meta_agent.shared.ids import random_id
from meta_agent.shared.text import one_line
from meta_agent.store import result_images
from meta_agent.store.conversations import Conversations, Turn
from meta_agent.store.database import LOCAL_OWNER, Database, Sql
from meta_agent.store.parking import SharedRounds
from meta_agent.store.preferences import UNREADABLE, Preferences, PreferenceStore
from meta_agent.store.run_events import RunEvents
from meta_agent.store.run_index import RunIndex, RunState, stopping
from meta_agent.toolbox.code_mode import with_run_code
from meta_agent.toolbox.live import LiveToolbox

if TYPE_CHECKING:
    from meta_agent.durable.runs import DurableRuns
    from meta_agent.durable.steps import RunSteps

log = structlog.get_logger(__name__)
PREVIOUS_TURN = "the conversation's previous turn"  # what a turn queued behind another waits for
MOVED_ON = (
    "the conversation moved on while this run was interrupted (a later turn was saved first); this turn was not saved"
)


@dataclass(frozen=True, kw_only=True)
class Caller:
    """What a run has of the caller that started it; a resumed durable run has none of it."""

    emit: Emit | None = None
    approver: Approver | None = None
    sampling: Provider | None = None
    questions: Questions | None = None


NO_CALLER = Caller()
# The front's hook for a durable run resumed here after its replica stopped: the run `spec`, whose body it runs with the
# caller the run has here (an MCP task's comes back with the task: front/tasks/resumed.py).
Resumed = Callable[[RunSpec, Callable[[Caller], Awaitable[RunResult]]], Awaitable[RunResult]]


class Runs:
    def __init__(
        self,
        settings: Settings,
        toolbox: LiveToolbox,
        models: ModelChain,
        database: Database,
        conversations: Conversations,
        index: RunIndex,
        *,
        durable: DurableRuns[Caller] | None,
        redact: Redactor,
        trace_dir: Path,
    ) -> None:
        """The runs of one engine: their tools from `toolbox`, their models from `models`, their conversations in
        `conversations`, each in the run `index`, durable where `durable` is given, traced into `trace_dir` with the
        secrets `redact` knows hidden; their events kept for their views (`events`), their tools as their subjects
        chose them (`preferences`)."""
        self.settings = settings
        self.toolbox = toolbox
        self.models = models
        self.database = database
        self.conversations = conversations
        self.index = index
        self.events = RunEvents(database)
        self.preferences = PreferenceStore(database)
        self.durable = durable
        self.trace_dir = trace_dir
        self.redact = redact  # the traces' redaction: what the views keep is redacted alike
        self._checks = ArgumentCheck()  # validators outlive a run: building one costs more than a step
        self._latest: dict[str, Event] = {}  # each running run's latest event: what it is doing (in_progress)
        self.resumed: Resumed | None = None  # None: a resumed durable run goes on without a caller

    async def run(
        self,
        task: str,
        *,
        mode: Mode,
        patterns: list[str] | None = None,
        max_steps: int | None = None,
        token_budget: int | None = None,
        emit: Emit | None = None,
        approver: Approver | None = None,
        sampling: Provider | None = None,
        questions: Questions | None = None,
        conversation_id: str | None = None,
        run_id: str | None = None,
        owner: str = LOCAL_OWNER,
        call_key: str | None = None,
        code: bool | None = None,
    ) -> RunResult:
        """One run of the loop with a caller's arguments (`Engine.run`), `owner`'s.

        Raises:
            ConfigError: a bad argument (max_steps over the ceiling, a token budget below 1), an unknown conversation
                or one whose stored record cannot be read.
            PatternError: a `tools` pattern that is malformed or matches no tool.
            ProviderError: no model is configured, or the provider failed.
        """
        spec = RunSpec(
            run_id=run_id or str(ULID()),
            task=task,
            mode=mode,
            patterns=patterns,
            limits=self.limits(mode, max_steps, token_budget),
            conversation_id=conversation_id or random_id(),  # nothing of it is told by the run's id
            continues=conversation_id is not None,
            can_ask=approver is not None,
            owner=owner,
            call_key=call_key,
            code=code,
            **current_trace_context(),  # the caller's (the host's request): the run's spans join its trace
        )
        caller = Caller(emit=emit, approver=approver, sampling=sampling, questions=questions)
        if self.durable is not None:
            return await self.durable.run(spec.run_id, spec, caller)
        return await self.body(spec, caller)

    async def body(self, spec: RunSpec, caller: Caller | None) -> RunResult:
        """The run `spec`, for `caller` (None: a durable run resumed after its replica stopped, whose caller is the
        front's `resumed` to find)."""
        if caller is None and self.resumed is not None:
            return await self.resumed(spec, partial(self._body, spec))
        return await self._body(spec, caller or NO_CALLER)

    async def _body(self, spec: RunSpec, caller: Caller) -> RunResult:
        emit = caller.emit

        async def waiting(seconds: float) -> None:  # a turn queued behind another is not a hung call
            if emit is not None:
                await emit(ev.Heartbeat(step=0, waiting_for=PREVIOUS_TURN, elapsed_s=seconds, run_id=spec.run_id))

        existing = spec.conversation_id if spec.continues else None
        owner = spec.owner or LOCAL_OWNER
        # running from the start: a run waiting for its turn of the conversation, or for its children, is one
        async with self.index.running(spec.run_id, spec.mode, spec.task, owner=owner, call_key=spec.call_key):
            if stopping():  # a run handed to this process as it stops: left, as interrupted, for another replica
                await anyio.sleep_forever()
            turning = self.conversations.turn(existing, new_id=spec.conversation_id, waiting=waiting, owner=owner)
            async with turning as turn:
                steps = None if self.durable is None else await self.durable.steps(can_ask=spec.can_ask)
                return await self._run_turn(turn, spec, caller, steps)

    async def _run_turn(self, turn: Turn, spec: RunSpec, caller: Caller, steps: RunSteps | None) -> RunResult:
        """`run`, within its turn of the conversation (`turn.history`: the transcript so far); each model turn,
        tool call and approval a step of `steps` where the run is durable."""
        # a resumed run continues from the history its first start read, whatever was saved since; a new conversation
        # has none to read (a step is two transactions: not spent on an empty history)
        if steps is None or not spec.continues:
            history = turn.history
        else:
            history = await steps.once("history", _same, turn.history)
        moved_on = history != turn.history  # resumed after another turn of its conversation was saved: not saved
        provider, *fallbacks = await self.models.models(caller.sampling)
        chosen = await self._chosen(spec.owner or LOCAL_OWNER)
        tools, search, unavailable = await self.toolbox.for_run(
            spec.patterns, spec.mode, self.settings.tool_search, chosen
        )
        coded = code_on(self.settings.code_mode, spec.code, spec.mode, len(tools))
        tools, search, code = with_run_code(self.toolbox, tools, search, coded, self.settings.code_time_limit)
        request = RunRequest(
            task=spec.task,
            mode=spec.mode,
            tools=tools,
            search=search,
            code=code,
            limits=spec.limits,
            history=history,
            run_id=spec.run_id,
            max_result_chars=self.settings.result_inline_chars,
            elapsed=None if steps is None else steps.elapsed,
            unavailable_servers=unavailable,
        )
        parent = parent_context(spec.traceparent, spec.tracestate)
        spans = Spans(conversation_id=turn.conversation_id, parent=parent, redact=self.redact)
        runner: ToolRunner = spans.traced(self.toolbox.runner(caller.questions))  # a child's call joins the trace
        provider, fallbacks = spans.traced_model(provider), [spans.traced_model(model) for model in fallbacks]
        approver = caller.approver
        if steps is not None:
            provider, fallbacks = steps.model(provider), [steps.model(model) for model in fallbacks]
            runner, approver = steps.tools(runner), steps.approver(approver)
        with structlog.contextvars.bound_contextvars(run_id=request.run_id):
            # the servers it goes without, also in the server's log (the progress and the live view say them too)
            not_ready = {"not_ready": unavailable_line(unavailable)} if unavailable else {}
            log.info("run_started", mode=spec.mode, model=provider.name, tools=len(request.tools), **not_ready)
            result = await self._loop(
                request,
                caller.emit,
                spans,
                resumed=steps is not None and steps.resumed,
                provider=provider,
                fallbacks=fallbacks,
                tools=runner,
                approver=approver,
            )
            result = await self._remember(result, turn, steps, moved_on=moved_on)
            await self.index.finished(request.run_id, result)
            usage = result.usage
            log.info(
                "run_finished",
                stop_reason=result.stop_reason,
                model_calls=usage.model_calls,
                tool_calls=usage.tool_calls,
                tokens=usage.input_tokens + usage.output_tokens,
            )
        return result

    async def _loop(
        self, request: RunRequest, emit: Emit | None, spans: Spans, *, resumed: bool, **parts: Any
    ) -> RunResult:
        """The loop's run of `request` with its `parts` (provider, fallbacks, tools, approver), each event to `emit`,
        the trace, telemetry and (durable) the run index; the trace is whole on disk before the result is returned."""
        trace = TraceWriter(self.trace_dir, self.redact)
        noted = None if self.durable is None else self.durable.noting(request.run_id)
        feed = RunFeed(self.events, request.run_id, self.redact, resumed=resumed)
        # telemetry and the views first: a caller's sink that raises (it ends the run) must not leave the run's spans
        # open for good, nor its views without its end
        sinks = [sink for sink in (spans, Metrics(), feed, emit, trace, noted) if sink is not None]

        async def fan_out(event: Event) -> None:
            self._latest[request.run_id] = event
            for sink in sinks:
                await sink(event)

        try:
            async with feed.writing():
                return await run(request, emit=fan_out, checks=self._checks, **parts)
        finally:
            self._latest.pop(request.run_id, None)
            with anyio.CancelScope(shield=True):
                await trace.aclose()

    async def _remember(
        self, result: RunResult, turn: Turn, steps: RunSteps | None, *, moved_on: bool = False
    ) -> RunResult:
        """The result with the conversation it continues. A turn that cannot be saved (a store that cannot be
        written, a hold lost to another process, a conversation that `moved_on` while the durable run was
        interrupted) keeps its answer, with no conversation id and `conversation_error` saying why in one line."""
        if steps is None:
            trimmed, error = await self._save(turn, result)
        else:  # saved once: a replay past it does not write the conversation again
            trimmed, error = await steps.once("conversation", self._save, turn, result, moved_on)
        if error is None:
            return dataclasses.replace(result, conversation_id=turn.conversation_id, conversation_trimmed=trimmed)
        log.warning("conversation_not_saved", path=self.database.label, error=error)
        return dataclasses.replace(result, conversation_error=error)

    async def _save(self, turn: Turn, result: RunResult, moved_on: bool = False) -> tuple[int, str | None]:
        """Save the turn: how many of its oldest turns were dropped, or why it was not saved (one line)."""
        if moved_on:  # saving would drop the turns saved since this run read its history
            return 0, MOVED_ON
        try:
            return await self.conversations.save(turn, result.transcript), None
        except (ConversationLost, ConfigError) as exc:
            error = str(exc)
        except self.database.errors as exc:
            error = f"{self.database.label}: cannot write the conversations store: {exc}; this turn was not saved"
        except (ValueError, RecursionError) as exc:
            error = f"this turn cannot be stored as JSON ({type(exc).__name__}: {exc}); it was not saved"
        return 0, one_line(error)  # whatever the error said

    async def forget_ended(self, older_than_days: float) -> tuple[int, int]:
        """Drop what the views kept of the runs that ended more than `older_than_days` ago (their events and
        questions), and the images of their results, as their traces are dropped: how many events and images. The
        database failing is logged, never raised."""
        cutoff = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(time.time() - older_than_days * 86400))
        try:
            events, images = await self.database.call(_forget_ended, cutoff)
        except self.database.errors as exc:
            log.warning("views_not_pruned", error=one_line(str(exc), 300), database=self.database.label)
            return 0, 0
        if events or images:
            log.info("views_pruned", events=events, images=images, older_than_days=older_than_days)
        return events, images

    async def _chosen(self, owner: str) -> Preferences:
        """What `owner` chose in the tool selector, for its run; where that cannot be read, that it cannot (the run
        then asks before every tool: what the owner switched off or set to `never` is at least asked)."""
        try:
            return await self.preferences.of(owner)
        except self.database.errors as exc:
            log.warning("preferences_not_read", error=one_line(str(exc), 300), database=self.database.label)
            return UNREADABLE

    def limits(self, mode: Mode, max_steps: int | None, token_budget: int | None) -> Limits:
        """A run's limits: the caller's within the settings' ceiling, else the settings' defaults for `mode`.

        Raises:
            ConfigError: `max_steps` outside 1..META_AGENT_MAX_STEPS_CEILING, or `token_budget` below 1.
        """
        ceiling = self.settings.max_steps_ceiling
        if max_steps is not None and not 1 <= max_steps <= ceiling:
            raise ConfigError(f"max_steps: {max_steps} is outside 1..{ceiling} (META_AGENT_MAX_STEPS_CEILING)")
        if token_budget is not None and token_budget < 1:
            raise ConfigError(f"token_budget: {token_budget} must be at least 1")
        default = {"ask": 1, "plan": min(DEFAULT_PLAN_STEPS, ceiling), "agent": self.settings.max_steps}[mode]
        return Limits(
            max_steps=1 if mode == "ask" else (max_steps or default),
            token_budget=token_budget or self.settings.token_budget,
            time_limit=self.settings.time_limit,
            max_tool_calls=self.settings.max_tool_calls,
        )

    def in_progress(self) -> list[str]:
        """What each running run is doing, a line each (`01K… · step 4 · call kid.big {…}`): its latest progress line.
        Safe to read from another thread while the event loop is stalled (cli/watchdog.py)."""
        return [f"{run_id} · {describe(event) or event.kind}" for run_id, event in list(self._latest.items())]

    async def cancel_for_good(self, run_id: str) -> None:
        """Stop the durable run `run_id` at its next step, on whichever replica runs it or resumes it (its task was
        cancelled through this replica, which does not run it)."""
        if self.durable is not None:
            await self.durable.cancel_for_good(run_id)

    def cancel_resumed(self, run_id: str) -> None:
        """Cancel the durable run `run_id` if this process resumed it (its caller, on another replica, cancelled it)."""
        if self.durable is not None:
            self.durable.cancel(run_id)

    async def read(self, run_id: str, owner: str, *, images: bool = False) -> RunState | None:
        """How `owner`'s run `run_id` is, from the run index any replica writes, with its result's images where
        `images` asks (None: `owner` has no such run)."""
        return await self.index.read(run_id, owner=owner, images=images)

    def in_touch(self) -> bool:
        """Whether durable runs can go on: no durable runs, or the database answered lately."""
        return self.durable is None or self.database.contact.in_touch

    async def allowed(self, conversation_id: str | None, owner: str) -> set[str]:
        """The tools `owner` allowed for the rest of the conversation `conversation_id` (none for a new one, none of
        another's, and none where the store cannot be read: the user is asked again)."""
        if conversation_id is None:
            return set()
        try:
            return await self.conversations.allowed(conversation_id, owner=owner)
        except ConfigError as exc:
            log.warning("allowances_not_read", conversation_id=conversation_id, error=str(exc))
            return set()

    async def allow(self, conversation_id: str, allowed: set[str], owner: str) -> None:
        """Keep `allowed` for the rest of `owner`'s conversation; where the store cannot be written, the user is
        asked again next time."""
        try:
            await self.conversations.allow(conversation_id, allowed, owner=owner)
        except self.database.errors as exc:
            log.warning("allowances_not_kept", conversation_id=conversation_id, error=str(exc))

    @asynccontextmanager
    async def shared_rounds(self, use_secret: Callable[[bytes], None]) -> AsyncIterator[SharedRounds | None]:
        """The parked rounds every replica of a shared database sees (None: the store is not shared), and the key
        they seal request states with, handed to `use_secret`.

        Raises:
            ConfigError: the shared database cannot be used.
        """
        url = self.settings.database_url
        if url is None:
            yield None
            return
        shared = SharedRounds(self.database, url, self.index.replica, alive_seconds=self.settings.lease_seconds)
        try:
            use_secret(await shared.secret())
        except self.database.errors as exc:
            raise ConfigError(f"META_AGENT_DATABASE_URL: cannot use {self.database.label}: {exc}") from None
        async with shared.serving():
            yield shared


def _forget_ended(sql: Sql, cutoff: str) -> tuple[int, int]:
    ended = "select id from runs where status = 'done' and updated < ?"
    sql.execute(f"delete from app_questions where run_id in ({ended})", (cutoff,))
    events = sql.execute(f"delete from run_events where run_id in ({ended})", (cutoff,))
    return events, result_images.forget(sql, ended, (cutoff,))


def _same(value: Any) -> Any:
    return value
