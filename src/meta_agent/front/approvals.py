"""Asking the host's user whether a tool may run, in both protocol eras (design.md §4).

- 2025-11-25 sessions with elicitation: a live `elicitation/create` in the middle of the run (`LiveApprover`).
  "Allow for this session" lasts as long as the MCP session.
- 2026-07-28 callers with elicitation: there is no back-channel, so the tool call *returns* an input-required result
  carrying the question and a sealed request state; the run waits, parked, until the caller retries with the answer
  and then goes on from where it stopped (`ParkedRuns`). A parked run nobody resumes is cancelled after
  `PARK_TIMEOUT`, and its children's calls with it. "Allow for this session" lasts, off HTTP, for the server's
  lifespan, which there serves one connection (stdio: the process, one user's session; in memory: the client), and
  over HTTP, which has no session in this era, for the conversation (`ConversationAllowances`); the question then
  says "this conversation". Which transport a request came by is told by `over_http`.
- Callers that declare no elicitation get no approver at all: the loop refuses `ask` tools, naming the setting.
"""

from __future__ import annotations

import itertools
import warnings
import weakref
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp.types as t
import structlog
from mcp.server.connection import Connection
from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from starlette.requests import Request
from ulid import ULID

from meta_agent.core import events as ev
from meta_agent.core.event_lines import arguments_line
from meta_agent.core.tool_call import Approver, Verdict
from meta_agent.core.tools import ToolSpec
from meta_agent.front.progress import Progress
from meta_agent.front.tool_results import tool_error

log = structlog.get_logger(__name__)

# The SDK seals request states for 600 s; a run parked longer could not be resumed anyway.
PARK_TIMEOUT = 600.0
INPUT_KEY = "approval"
CHOICES = {"allow_once": "allowed once", "allow_session": "allowed for this {scope}", "deny": "denied"}
# How many conversations an HTTP server remembers allowances for; the least recently used is forgotten first.
CONVERSATIONS_KEPT = 10_000


def schema(scope: str = "session") -> dict[str, Any]:
    """The question's form; `scope` ("session" or "conversation") is what "allow_session" lasts for."""
    return {
        "type": "object",
        "properties": {
            "decision": {
                "type": "string",
                "title": "Allow this tool call?",
                "enum": list(CHOICES),
                "description": f"allow_once: this call only; allow_session: this tool for the rest of this {scope}; "
                "deny: not this time",
            }
        },
        "required": ["decision"],
    }


SCHEMA = schema()
ARGUMENTS_SHOWN = 400
# Events of a parked run kept for its next round (a parallel call's result, heartbeats); older ones are dropped.
BACKLOG = 200


def question(spec: ToolSpec, arguments: Mapping[str, Any]) -> str:
    shown = arguments_line(arguments, ARGUMENTS_SHOWN)
    return f"meta-agent wants to run {spec.name} ({spec.hints.describe()}) with {shown}. Allow it?"


def verdict_of(result: t.ElicitResult | None, scope: str = "session") -> Verdict:
    """The user's answer, as the loop reads it; anything but a clear yes is a no."""
    if result is None:
        return Verdict(False, "no answer")
    if result.action != "accept":
        return Verdict(False, "declined" if result.action == "decline" else "cancelled")
    decision = (result.content or {}).get("decision")
    if decision not in CHOICES:
        return Verdict(False, f"unreadable answer {decision!r}")
    return Verdict(decision != "deny", CHOICES[str(decision)].format(scope=scope))


def remembers(verdict: Verdict, scope: str = "session") -> bool:
    """Whether `verdict` allows the tool for the rest of the `scope`, not just this call."""
    return verdict.answer == CHOICES["allow_session"].format(scope=scope)


def can_elicit(ctx: Context) -> bool:
    caps = ctx.client_capabilities
    return caps is not None and caps.elicitation is not None


def is_modern(ctx: Context) -> bool:
    return not getattr(ctx.session, "can_send_request", False)


def over_http(ctx: Context) -> bool:
    """Whether this request came over HTTP: the SDK hands its handlers the HTTP request there, and None on stdio
    or in memory (meta_agent.front.call_guard reads it the same way)."""
    return isinstance(ctx.request_context.request, Request)


class SessionAllowances:
    """Tools the user allowed "for this session", per MCP session; forgotten when the session is."""

    def __init__(self) -> None:
        self._by_session: weakref.WeakKeyDictionary[Connection, set[str]] = weakref.WeakKeyDictionary()

    def of(self, ctx: Context) -> set[str]:
        return self._by_session.setdefault(session_connection(ctx), set())


class ConversationAllowances:
    """Tools the user allowed "for this conversation", per conversation id: what "allow for this session" means
    to a 2026-07-28 caller over HTTP, which has no session. Held in memory, for the `CONVERSATIONS_KEPT` most
    recently used conversations; a restarted server asks again."""

    def __init__(self) -> None:
        self._by_conversation: OrderedDict[str, set[str]] = OrderedDict()

    def of(self, conversation_id: str | None) -> set[str]:
        """The tools allowed in `conversation_id` (an empty set of its own for a run that starts a conversation)."""
        if conversation_id is None:
            return set()
        allowed = self._by_conversation.get(conversation_id, set())
        self.keep(conversation_id, allowed)
        return allowed

    def keep(self, conversation_id: str, allowed: set[str]) -> None:
        """Remember `allowed` (the same set, which a run may still add to) for the conversation `conversation_id`."""
        self._by_conversation[conversation_id] = allowed
        self._by_conversation.move_to_end(conversation_id)
        while len(self._by_conversation) > CONVERSATIONS_KEPT:
            self._by_conversation.popitem(last=False)


def session_connection(ctx: Context) -> Connection:
    """The SDK's `Connection` behind `ctx`, which lives as long as the MCP session (one per 2025-11-25 session).

    The SDK builds a new `ServerSession` for every request and gives no public handle on the connection behind it,
    so this is the one read of an SDK internal; tests/test_approvals.py::test_the_session_connection_* fails when
    an SDK release moves it.

    Raises:
        TypeError: the installed SDK no longer keeps the connection where this reads it.
    """
    connection = getattr(ctx.session, "_connection", None)
    if not isinstance(connection, Connection):
        raise TypeError(
            "this mcp SDK keeps no Connection in ServerSession._connection; "
            "meta_agent.front.approvals.session_connection needs updating for it"
        )
    return connection


class LiveApprover:
    """Asks through a live `elicitation/create` on a 2025-11-25 session."""

    def __init__(self, ctx: Context, allowed: set[str]) -> None:
        self._ctx = ctx
        self._allowed = allowed

    def remembered(self, spec: ToolSpec) -> bool:
        return spec.name in self._allowed

    async def ask(self, spec: ToolSpec, arguments: Mapping[str, Any]) -> Verdict:
        try:
            result = await self._ctx.session.elicit_form(
                question(spec, arguments), SCHEMA, related_request_id=self._ctx.request_context.request_id
            )
        except MCPError as exc:
            return Verdict(False, f"could not ask the user: {exc.message}")
        verdict = verdict_of(result)
        if remembers(verdict):
            self._allowed.add(spec.name)
        return verdict


class ForwardedQuestions:
    """A child's question during a call, passed on to our caller on its 2025-11-25 session (the only era with a
    back-channel). What the caller cannot answer is declined (elicitation) or refused (sampling)."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    async def elicit(self, params: t.ElicitRequestFormParams) -> t.ElicitResult:
        if not can_elicit(self._ctx):
            return t.ElicitResult(action="decline")
        result: t.ElicitResult = await self._ctx.session.elicit_form(
            params.message, params.requested_schema, related_request_id=self._ctx.request_context.request_id
        )
        return result

    async def sample(self, params: t.CreateMessageRequestParams) -> t.CreateMessageResult:
        caps = self._ctx.client_capabilities
        if caps is None or caps.sampling is None:
            raise MCPError(t.INVALID_REQUEST, "it declared no sampling capability")
        with warnings.catch_warnings():  # sampling is deprecated in 2026-07-28; this session is 2025-11-25
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            sampled: t.CreateMessageResult = await self._ctx.session.create_message(
                params.messages,
                max_tokens=params.max_tokens,
                system_prompt=params.system_prompt,
                temperature=params.temperature,
                stop_sequences=params.stop_sequences,
                model_preferences=params.model_preferences,
                related_request_id=self._ctx.request_context.request_id,
            )
        return sampled


Work = Callable[[Callable[[ev.Event], Awaitable[None]], Approver], Awaitable[t.CallToolResult]]


@dataclass(frozen=True)
class _Question:
    seq: int
    spec: ToolSpec
    arguments: Mapping[str, Any]


@dataclass
class _Pending:
    seq: int
    answered: anyio.Event = field(default_factory=anyio.Event)
    verdict: Verdict = field(default_factory=lambda: Verdict(False, "no answer"))


class ParkedRun:
    """One run of a 2026-07-28 caller that may stop to ask; it is the loop's approver.

    Questions go out one at a time, each with its own number; a retry answers the question whose number it carries,
    once, and only while that question is pending. One round of the call is live at a time.
    """

    def __init__(self, allowed: set[str], scope: str) -> None:
        self.id = str(ULID())
        self.allowed = allowed  # shared with later runs of the same session or conversation
        self.scope_word = scope  # what "allow_session" lasts for: "session" or "conversation"
        self.scope = anyio.CancelScope()
        self.ticks = itertools.count(1)  # progress keeps counting up across the rounds
        self._to_caller, self._from_run = anyio.create_memory_object_stream[_Question | t.CallToolResult](1)
        self._asking = anyio.Lock()
        self._seq = 0
        self._pending: _Pending | None = None
        self._round_live = False
        self._sink: Callable[[ev.Event], Awaitable[None]] | None = None
        self._backlog: deque[ev.Event] = deque(maxlen=BACKLOG)

    # -- the loop's side -------------------------------------------------------------------------------------------

    def remembered(self, spec: ToolSpec) -> bool:
        return spec.name in self.allowed

    async def ask(self, spec: ToolSpec, arguments: Mapping[str, Any]) -> Verdict:
        async with self._asking:  # concurrent calls of one step are asked about one after another
            self._seq += 1
            pending = self._pending = _Pending(self._seq)
            try:
                await self._to_caller.send(_Question(pending.seq, spec, arguments))
                with anyio.move_on_after(PARK_TIMEOUT):
                    await pending.answered.wait()
                    if remembers(pending.verdict, self.scope_word):
                        self.allowed.add(spec.name)
                    return pending.verdict
            finally:
                self._pending = None
        log.warning("parked_run_reaped", parked=self.id, tool=spec.name, after_s=PARK_TIMEOUT)
        self.scope.cancel()  # nobody came back: end the run, and its children's calls with it
        await anyio.lowlevel.checkpoint()
        return Verdict(False, "no answer in time")

    async def emit(self, event: ev.Event) -> None:
        """Progress goes to whichever round of the call is live; between rounds it waits for the next one."""
        if self._sink is not None:
            await self._sink(event)
        else:
            self._backlog.append(event)

    async def execute(self, work: Work, done: Callable[[], object]) -> None:
        answered = False
        try:
            with self.scope:
                try:
                    result = await work(self.emit, self)
                except Exception as exc:  # a bug must end this call with an error, not the server's lifespan
                    log.exception("parked_run_failed", parked=self.id)
                    result = tool_error(f"the run failed: {type(exc).__name__}: {exc}")
                await self._to_caller.send(result)
                answered = True
        finally:
            self._to_caller.close()
            if not answered:  # reaped or cancelled: no round will come to collect anything
                self._from_run.close()
            done()

    # -- the caller's side -----------------------------------------------------------------------------------------

    def answer(self, seq: int, verdict: Verdict) -> bool:
        """Hand the answer to question `seq`; False if that question is not the one pending (answered, replayed)."""
        pending = self._pending
        if self._round_live or pending is None or pending.seq != seq or pending.answered.is_set():
            return False
        pending.verdict = verdict
        pending.answered.set()
        return True

    @property
    def round_live(self) -> bool:
        return self._round_live

    async def next_round(self, sink: Callable[[ev.Event], Awaitable[None]]) -> _Question | t.CallToolResult:
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


class ParkedRuns:
    """The parked runs of 2026-07-28 callers, run in a task group the server's lifespan owns."""

    def __init__(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg
        self._runs: dict[str, ParkedRun] = {}

    async def drive(
        self, ctx: Context, work: Work, allowed: set[str], scope: str
    ) -> t.CallToolResult | t.InputRequiredResult:
        """One round of a call: start the run (first call) or resume it with the caller's answer (a retry). A new
        run remembers what the user allows "for this `scope`" in `allowed` (a retry goes on with its run's own)."""
        if ctx.request_state:
            run_id, _, seq = ctx.request_state.partition(":")
            run = self._runs.get(run_id)
            if run is None or not seq.isdigit():
                return tool_error("this approval is no longer pending (answered, or not answered in time); call again")
            if run.round_live:
                return tool_error("another round of this call is already waiting; answer that one")
            response = (ctx.input_responses or {}).get(INPUT_KEY)
            verdict = verdict_of(response if isinstance(response, t.ElicitResult) else None, run.scope_word)
            if not run.answer(int(seq), verdict):
                return tool_error("that question was answered already, or is no longer pending")
        else:
            run = ParkedRun(allowed, scope)
            self._runs[run.id] = run
            self._tg.start_soon(run.execute, work, lambda: self._runs.pop(run.id, None))
        progress = Progress(ctx, ticks=run.ticks)
        try:
            outcome = await run.next_round(progress)
        finally:
            progress.close()
        if isinstance(outcome, t.CallToolResult):
            return outcome
        request = t.ElicitRequest(
            params=t.ElicitRequestFormParams(
                message=question(outcome.spec, outcome.arguments), requested_schema=schema(run.scope_word)
            )
        )
        return t.InputRequiredResult(input_requests={INPUT_KEY: request}, request_state=f"{run.id}:{outcome.seq}")
