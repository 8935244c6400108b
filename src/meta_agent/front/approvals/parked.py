"""A run of a 2026-07-28 caller, parked between the rounds of its call (README, Trust and approval).

This era has no back-channel: to ask the caller anything, the tool call *returns* an input-required result carrying
the question and a sealed request state, and the run waits, parked, until the caller retries with the answer, then
goes on from where it stopped. Three kinds of question take that road, one at a time and numbered alike: the loop's
approvals (meta_agent.front.approvals.asking), a child's own questions during a call (elicitation; sampling where the
caller declared it), which reach the caller as the child asked them and whose answers reach the child as the caller
gave them, and each turn of the host's own model where the caller lends it (meta_agent.front.host_model). A
parked run nobody resumes is cancelled after `PARK_TIMEOUT`, and its children's calls with it. At
most META_AGENT_MAX_PARKED runs wait at once (`ParkingSpaces`); a run that would wait past that ends at once, its
call answered with a one-line error saying so. A waiting run holds no file descriptor (its trace is not kept open).
A parked run is its caller's (`owner`, the subject of meta_agent.front.auth.subjects): a retry from anyone else, even
one carrying the round's own request state, is told the question is no longer pending, as a run that ended is.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import anyio
import mcp.types as t
import structlog
from mcp.server.request_state import AESGCMRequestStateCodec
from mcp.shared.exceptions import MCPError
from pydantic import TypeAdapter, ValidationError

from meta_agent.core import events as ev
from meta_agent.front.progress import progress_message
from meta_agent.front.tool_results import tool_error
from meta_agent.shared.ids import random_ulid
from meta_agent.store.database import LOCAL_OWNER
from meta_agent.store.parking import Outcome, SharedRounds

log = structlog.get_logger(__name__)

# The SDK seals request states for 600 s; a run parked longer could not be resumed anyway.
PARK_TIMEOUT = 600.0
# Events of a parked run kept for its next round (a parallel call's result, heartbeats); older ones are dropped.
BACKLOG = 200
NO_LONGER_PENDING = "this question is no longer pending (answered, or not answered in time); call again"
ANSWERED = "that question was answered already, or is no longer pending"
# The `input_requests` key of a child's question (the loop's approvals have their own: approvals.INPUT_KEY).
QUESTION_KEY = "question"

Sink = Callable[[ev.Event], Awaitable[None]]
CallerRequest = t.ElicitRequest | t.CreateMessageRequest


class ParkingSpaces:
    """How many runs may wait for an answer at once (META_AGENT_MAX_PARKED), and how many do."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.taken = 0

    def take(self) -> bool:
        if self.taken >= self.limit:
            return False
        self.taken += 1
        return True

    def give_back(self) -> None:
        self.taken -= 1

    def full(self) -> t.CallToolResult:
        """What the call whose run would wait past the limit gets."""
        return tool_error(
            f"the run needs an answer, but {self.limit:,} runs already wait for one (META_AGENT_MAX_PARKED); "
            "answer or abandon one of them, or call again later"
        )


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
    the caller declared the sampling capability (without it, a child's sampling request is refused, unasked), and
    `elicitation` whether it declared elicitation (without it, a child's elicitation is declined, unasked).

    The run's outcomes are numbered like its questions: question n is outcome n, and the call's result follows the
    last question. A round that answered question n waits for the first outcome after n. With `shared` (replicas on
    one PostgreSQL database) every outcome is also posted there, an answer may come through another replica, and
    then so does the next round, which hears the run's progress through the database too.
    """

    def __init__(
        self,
        spaces: ParkingSpaces,
        *,
        sampling: bool = False,
        elicitation: bool = True,
        shared: SharedRounds | None = None,
        parked_id: str | None = None,
        detached: bool = False,
        owner: str = LOCAL_OWNER,
    ) -> None:
        """`parked_id`: the run's own id where it has one already (an MCP task's); `detached`: the run outlives its
        rounds (a task's: a caller that stops waiting for it does not stop it); `owner`: whose run it is, the only
        subject whose answers it takes."""
        self.id = parked_id or random_ulid()  # nothing of it is told by the ids its caller sees
        self.owner = owner
        self.scope = anyio.CancelScope()
        self.detached = detached
        self.ticks = itertools.count(1)  # progress keeps counting up across the rounds
        self._spaces = spaces
        self._refused: t.CallToolResult | None = None  # the call's answer when the run could not wait
        self._shared = shared
        self._sampling = sampling
        self._elicitation = elicitation
        self._asking = anyio.Lock()
        self._seq = 0
        self._pending: _Pending | None = None
        self.withdrawn: set[int] = set()  # questions answered elsewhere (the run view) before the caller answered
        self._outcome: tuple[int, Question | t.CallToolResult] | None = None  # the latest, and its number
        self._posted = anyio.Event()  # set (and replaced) when an outcome is posted
        self._ended = False
        self._round_live = False
        self._remote = False  # the live round is another replica's (it took the latest answer)
        self._sink: Sink | None = None
        self._backlog: deque[ev.Event] = deque(maxlen=BACKLOG)

    # -- the run's side --------------------------------------------------------------------------------------------

    async def ask(self, key: str, request: CallerRequest) -> t.InputResponse | None:
        """Put `request` to the caller as the next round of the call (under `key`) and wait for the answer: None when
        none came under `key`, none came in time (the run is then reaped), or the run ended first."""
        # One question at a time: a step's concurrent approvals, and children asking meanwhile, wait their turn.
        async with self._asking:
            if self._ended:
                return None  # a child asking late: no round will carry the question
            if not self._spaces.take():
                await self._end_refused()
                return None
            self._seq += 1
            pending = self._pending = _Pending(self._seq, key)
            try:
                await self._post(pending.seq, Question(pending.seq, key, request))
                with anyio.move_on_after(PARK_TIMEOUT):
                    async with anyio.create_task_group() as answers:
                        if self._shared is not None:
                            answers.start_soon(self._answer_from_elsewhere, pending)
                        await pending.answered.wait()
                        answers.cancel_scope.cancel()
                    return pending.response
            except anyio.get_cancelled_exc_class():  # withdrawn (answered in the run view), or the run ends
                if not pending.answered.is_set():
                    self.withdrawn.add(pending.seq)
                raise
            finally:
                self._pending = None
                self._spaces.give_back()
        log.warning("parked_run_reaped", parked=self.id, asked=key, after_s=PARK_TIMEOUT)
        self.scope.cancel()  # nobody came back: end the run, and its children's calls with it
        await anyio.lowlevel.checkpoint()
        return None

    async def _end_refused(self) -> None:
        """The run would wait past META_AGENT_MAX_PARKED: end it now; its call gets the one line saying so."""
        self._refused = self._spaces.full()
        self.scope.cancel()
        await anyio.lowlevel.checkpoint()

    async def elicit(self, params: t.ElicitRequestFormParams) -> t.ElicitResult:
        """A child's question, asked of the caller as the child put it; anything but an ElicitResult is a decline, and
        so is every question where the caller declared no elicitation (it is not asked)."""
        if not self._elicitation:
            return t.ElicitResult(action="decline")
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
        """Progress goes to whichever round of the call is live, here or on another replica; between rounds it waits
        for the next one."""
        if isinstance(event, ev.RunStarted) and self._shared is not None:
            await self._tell(self._shared.running, self.id, event.run_id)
        if self._sink is not None:
            await self._sink(event)
        elif self._remote:
            await self._relay(event)
        else:
            self._backlog.append(event)

    async def execute(self, work: Callable[[], Awaitable[t.CallToolResult]], done: Callable[[], object]) -> None:
        """Run `work` to its result, which the next round collects; `done` once it has ended, however it ended."""
        answered = False
        try:
            if self._shared is not None:  # a task's run resumed here numbers its questions on after its last
                asked = await self._tell(self._shared.opened, self.id, self.scope.cancel, self.owner)
                self._seq = max(self._seq, asked or 0)
            with self.scope:
                try:
                    result = await work()
                except Exception as exc:  # a bug must end this call with an error, not the server's lifespan
                    log.exception("parked_run_failed", parked=self.id)
                    result = tool_error(f"the run failed: {type(exc).__name__}: {exc}")
                await self._post(self._seq + 1, result)
                answered = True
        finally:
            self._ended = True
            if self._pending is not None:  # a child still asking (from its own task): nobody will answer now
                self._pending.answered.set()
            if not answered:  # reaped, refused or cancelled: a round waiting (here or elsewhere) learns it ended
                with anyio.CancelScope(shield=True):
                    await self._post(self._seq + 1, self._refused or _ended())
            if self._shared is not None:
                self._shared.ended(self.id)
            done()

    # -- the caller's side -----------------------------------------------------------------------------------------

    def can_answer(self, seq: int) -> str | None:
        """Why question `seq` cannot be answered here now, or None."""
        pending = self._pending
        if self._round_live:
            return "another round of this call is already waiting; answer that one"
        if pending is None or pending.seq != seq or pending.answered.is_set():
            return ANSWERED
        return None

    def was_withdrawn(self, seq: int) -> bool:
        """Whether question `seq` was withdrawn (answered in the run view) and no round of the call is waiting: a
        round answering it late goes on with the call."""
        return seq in self.withdrawn and not self._round_live

    def answer(self, seq: int, responses: Mapping[str, t.InputResponse]) -> bool:
        """Hand the caller's `responses` to question `seq`; False if that question is not the one pending (answered,
        replayed)."""
        if self.can_answer(seq) is not None:
            return False
        assert self._pending is not None
        self._pending.response = responses.get(self._pending.key)
        self._pending.answered.set()
        return True

    async def next_round(self, sink: Sink, after: int = 0) -> Question | t.CallToolResult:
        """Wait for the run's first outcome after question `after` (0: its first), reporting progress to this round
        meanwhile."""
        self._round_live = True
        self._sink = sink
        try:
            while self._backlog:
                await sink(self._backlog.popleft())
            while (self._outcome is None or self._outcome[0] <= after) and not self._ended:
                await self._posted.wait()
            outcome = self._outcome[1] if self._outcome is not None and self._outcome[0] > after else _ended()
        except anyio.get_cancelled_exc_class():
            if not self.detached:
                self.scope.cancel()  # the caller gave up on this round: stop the run
            raise
        finally:
            self._sink = None
            self._round_live = False
        if isinstance(outcome, t.CallToolResult) and self._shared is not None:
            await self._tell(self._shared.collected, self.id)
        return outcome

    def latest(self) -> tuple[int, Question | t.CallToolResult] | None:
        """The run's latest outcome and its number, without waiting: the question pending (while `can_answer` its
        number), or the result; None before the first."""
        return self._outcome

    async def changed(self) -> None:
        """Wait for the run's next outcome, or its end."""
        if not self._ended:
            await self._posted.wait()

    @property
    def ended(self) -> bool:
        return self._ended

    # -- below -----------------------------------------------------------------------------------------------------

    async def _post(self, seq: int, outcome: Question | t.CallToolResult) -> None:
        self._outcome = (seq, outcome)
        self._remote = False  # the round on another replica ends with this outcome
        posted, self._posted = self._posted, anyio.Event()
        posted.set()
        if self._shared is not None:
            body = outcome if isinstance(outcome, t.CallToolResult) else outcome.round(self.id)
            dumped = body.model_dump(mode="json", by_alias=True)
            await self._tell(self._shared.post, self.id, Outcome(seq, dumped, final=body is outcome))

    async def _answer_from_elsewhere(self, pending: _Pending) -> None:
        """Take the answer to `pending` given through another replica; that replica's round is live from now on."""
        assert self._shared is not None
        try:
            answer = await self._shared.answer_to(self.id, pending.seq)
        except self._shared.database.errors as exc:
            log.warning("parked_answer_not_heard", parked=self.id, error=str(exc))
            return  # an answer through this replica still comes
        if answer is None or pending.answered.is_set():
            return
        try:
            responses = responses_type().validate_python(answer)
        except ValidationError:
            responses = {}
        self._remote = True
        pending.response = responses.get(pending.key)
        pending.answered.set()
        while self._backlog and self._remote:
            await self._relay(self._backlog.popleft())

    async def _relay(self, event: ev.Event) -> None:
        """`event` to the live round on another replica."""
        assert self._shared is not None
        if (message := progress_message(event)) is not None:
            await self._tell(self._shared.progress, self.id, next(self.ticks), message)

    async def _tell(self, write: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """A write to the shared rounds, and what it answered; one that fails is logged (None): rounds through this
        replica still work."""
        assert self._shared is not None
        try:
            return await write(*args)
        except self._shared.database.errors as exc:
            log.warning("parked_round_not_shared", parked=self.id, error=str(exc), database=self._shared.database.label)
            return None


@cache
def responses_type() -> TypeAdapter[dict[str, t.InputResponse]]:
    """What a retry's `inputResponses` hold (built on first use: only replicas sharing rounds read them as JSON)."""
    return TypeAdapter(dict[str, t.InputResponse])


class SharedKey:
    """The request-state codec of replicas sharing a database: AES-GCM under the key they share, which the server's
    lifespan reads from the database (`use`) before any request is served; without it, a round sealed by one replica
    could not be unsealed by another."""

    def __init__(self) -> None:
        self._codec: AESGCMRequestStateCodec | None = None

    def use(self, key: bytes) -> None:
        self._codec = AESGCMRequestStateCodec([key])

    def seal(self, payload: bytes) -> str:
        assert self._codec is not None, "a request state sealed before the shared key was read"
        return self._codec.seal(payload)

    def unseal(self, token: str) -> bytes:
        assert self._codec is not None, "a request state unsealed before the shared key was read"
        return self._codec.unseal(token)


def _ended() -> t.CallToolResult:
    return tool_error("the run ended without a result (it was cancelled, or the server is stopping)")
