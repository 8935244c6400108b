"""A run of a 2026-07-28 caller, parked between the rounds of its call (design.md §4).

This era has no back-channel: to ask the caller anything, the tool call *returns* an input-required result carrying
the question and a sealed request state, and the run waits, parked, until the caller retries with the answer, then
goes on from where it stopped. Two kinds of question take that road, one at a time and numbered alike: the loop's
approvals (meta_agent.front.approvals) and a child's own questions during a call (elicitation; sampling where the
caller declared it), which reach the caller as the child asked them and whose answers reach the child as the caller
gave them. A parked run nobody resumes is cancelled after `PARK_TIMEOUT`, and its children's calls with it.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import anyio
import mcp.types as t
import structlog
from mcp.shared.exceptions import MCPError
from ulid import ULID

from meta_agent.core import events as ev
from meta_agent.front.tool_results import tool_error

log = structlog.get_logger(__name__)

# The SDK seals request states for 600 s; a run parked longer could not be resumed anyway.
PARK_TIMEOUT = 600.0
# Events of a parked run kept for its next round (a parallel call's result, heartbeats); older ones are dropped.
BACKLOG = 200
# The `input_requests` key of a child's question (the loop's approvals have their own: approvals.INPUT_KEY).
QUESTION_KEY = "question"

Sink = Callable[[ev.Event], Awaitable[None]]
CallerRequest = t.ElicitRequest | t.CreateMessageRequest


@dataclass(frozen=True)
class Question:
    """One question for the caller: its number in the run, and its entry of the round's `input_requests`."""

    seq: int
    key: str
    request: CallerRequest

    def round(self, run_id: str) -> t.InputRequiredResult:
        """The round that puts this question to the caller; its retry carries the run and the number back."""
        return t.InputRequiredResult(input_requests={self.key: self.request}, request_state=f"{run_id}:{self.seq}")


@dataclass
class _Pending:
    """The question waiting for its answer, and the answer (None: none came, or none under the question's key)."""

    seq: int
    key: str
    answered: anyio.Event = field(default_factory=anyio.Event)
    response: t.InputResponse | None = None


class ParkedRun:
    """One run of a 2026-07-28 caller that may stop to ask; it is the `Questions` its children's questions go to.

    Questions go out one at a time, each with its own number; a retry answers the question whose number it carries,
    once, and only while that question is pending. One round of the call is live at a time. `sampling` says whether
    the caller declared the sampling capability (without it, a child's sampling request is refused, unasked).
    """

    def __init__(self, *, sampling: bool = False) -> None:
        self.id = str(ULID())
        self.scope = anyio.CancelScope()
        self.ticks = itertools.count(1)  # progress keeps counting up across the rounds
        self._sampling = sampling
        self._to_caller, self._from_run = anyio.create_memory_object_stream[Question | t.CallToolResult](1)
        self._asking = anyio.Lock()
        self._seq = 0
        self._pending: _Pending | None = None
        self._round_live = False
        self._sink: Sink | None = None
        self._backlog: deque[ev.Event] = deque(maxlen=BACKLOG)

    # -- the run's side --------------------------------------------------------------------------------------------

    async def ask(self, key: str, request: CallerRequest) -> t.InputResponse | None:
        """Put `request` to the caller as the next round of the call (under `key`) and wait for the answer: None when
        none came under `key`, none came in time (the run is then reaped), or the run ended first."""
        # One question at a time: a step's concurrent approvals, and children asking meanwhile, wait their turn.
        async with self._asking:
            self._seq += 1
            pending = self._pending = _Pending(self._seq, key)
            try:
                await self._to_caller.send(Question(pending.seq, key, request))
                with anyio.move_on_after(PARK_TIMEOUT):
                    await pending.answered.wait()
                    return pending.response
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return None  # the run has ended (a child asked late): no round will carry the question
            finally:
                self._pending = None
        log.warning("parked_run_reaped", parked=self.id, asked=key, after_s=PARK_TIMEOUT)
        self.scope.cancel()  # nobody came back: end the run, and its children's calls with it
        await anyio.lowlevel.checkpoint()
        return None

    async def elicit(self, params: t.ElicitRequestFormParams) -> t.ElicitResult:
        """A child's question, asked of the caller as the child put it; anything but an ElicitResult is a decline."""
        answer = await self.ask(QUESTION_KEY, t.ElicitRequest(params=params))
        return answer if isinstance(answer, t.ElicitResult) else t.ElicitResult(action="decline")

    async def sample(self, params: t.CreateMessageRequestParams) -> t.CreateMessageResult:
        """A child's request for a completion, sent to the caller's model as the child put it.

        Raises:
            MCPError: the caller declared no sampling capability, or answered with something else than a completion.
        """
        if not self._sampling:
            raise MCPError(t.INVALID_REQUEST, "it declared no sampling capability")
        answer = await self.ask(QUESTION_KEY, t.CreateMessageRequest(params=params))
        if not isinstance(answer, t.CreateMessageResult):
            raise MCPError(t.INVALID_REQUEST, "it gave no completion")
        return answer

    async def emit(self, event: ev.Event) -> None:
        """Progress goes to whichever round of the call is live; between rounds it waits for the next one."""
        if self._sink is not None:
            await self._sink(event)
        else:
            self._backlog.append(event)

    async def execute(self, work: Callable[[], Awaitable[t.CallToolResult]], done: Callable[[], object]) -> None:
        """Run `work` to its result, which the next round collects; `done` once it has ended, however it ended."""
        answered = False
        try:
            with self.scope:
                try:
                    result = await work()
                except Exception as exc:  # a bug must end this call with an error, not the server's lifespan
                    log.exception("parked_run_failed", parked=self.id)
                    result = tool_error(f"the run failed: {type(exc).__name__}: {exc}")
                await self._to_caller.send(result)
                answered = True
        finally:
            self._to_caller.close()
            if self._pending is not None:  # a child still asking (from its own task): nobody will answer now
                self._pending.answered.set()
            if not answered:  # reaped or cancelled: no round will come to collect anything
                self._from_run.close()
            done()

    # -- the caller's side -----------------------------------------------------------------------------------------

    def answer(self, seq: int, responses: Mapping[str, t.InputResponse]) -> bool:
        """Hand the caller's `responses` to question `seq`; False if that question is not the one pending (answered,
        replayed)."""
        pending = self._pending
        if self._round_live or pending is None or pending.seq != seq or pending.answered.is_set():
            return False
        pending.response = responses.get(pending.key)
        pending.answered.set()
        return True

    @property
    def round_live(self) -> bool:
        return self._round_live

    async def next_round(self, sink: Sink) -> Question | t.CallToolResult:
        """Wait for the run's next question or its result, reporting progress to this round meanwhile."""
        self._round_live = True
        self._sink = sink
        try:
            while self._backlog:
                await sink(self._backlog.popleft())
            outcome = await self._from_run.receive()
        except anyio.get_cancelled_exc_class():
            self.scope.cancel()  # the caller gave up on this round: stop the run
            raise
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            outcome = _ended()
        finally:
            self._sink = None
            self._round_live = False
        if isinstance(outcome, t.CallToolResult):
            self._from_run.close()
        return outcome


def _ended() -> t.CallToolResult:
    return tool_error("the run ended without a result (it was cancelled, or the server is stopping)")
