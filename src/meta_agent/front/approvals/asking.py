"""Asking the host's user whether a tool may run, in both protocol eras (README, Trust and approval), and passing a
child's own questions during a call on to that user.

- 2025-11-25 sessions with elicitation: a live `elicitation/create` in the middle of the run (`LiveApprover`).
  "Allow for this session" lasts as long as the MCP session. A child's questions go to the caller live too
  (`ForwardedQuestions`).
- 2026-07-28 callers with elicitation or sampling: there is no back-channel, so the run is parked between the rounds
  of its call (`ParkedRuns`; the rounds themselves are meta_agent.front.approvals.parked): an approval is a round whose
  input request is the question (key "approval"), where the caller declared elicitation; and so is a child's
  elicitation, or its sampling where the caller declared sampling (key "question", the child's request as it came),
  and each turn of the host's own model where it lends it (key "sampling", meta_agent.front.host_model), one question
  at a time. "Allow for this session"
  lasts, off HTTP, for the server's lifespan, which there serves one connection (stdio: the process, one user's
  session; in memory: the client), and over HTTP, which has no session in this era, for the conversation
  (kept in the database with the conversations, so every replica sharing it knows); the question then says "this
  conversation". Which transport a request came by is
  told by `over_http`.
- Every grant is its subject's (meta_agent.front.auth.subjects): a session's per subject, a conversation's with the
  conversation, which is one subject's; a parked run takes answers from its own subject only.
- Callers that declare no elicitation get no approver at all: the loop refuses `ask` tools, naming the setting. A
  2026-07-28 caller among them that declares no sampling either has no parked run, so its children's questions are
  declined (elicitation) or refused (sampling).
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any

import anyio
import mcp.types as t
import structlog
from mcp.server.connection import Connection
from mcp.server.mcpserver import Context
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from starlette.requests import Request

from meta_agent.children.questions import Questions
from meta_agent.core.event_lines import arguments_line
from meta_agent.core.provider import Provider
from meta_agent.core.tool_call import Approver, Verdict
from meta_agent.core.tools import ToolSpec
from meta_agent.front.approvals.parked import (
    ANSWERED,
    NO_LONGER_PENDING,
    PARK_TIMEOUT,
    ParkedRun,
    ParkingSpaces,
    Sink,
)
from meta_agent.front.host_model import asked_model, declares_sampling, lends_model
from meta_agent.front.progress import Progress
from meta_agent.front.tool_results import tool_error
from meta_agent.records.run_feed import safe
from meta_agent.store.parking import Note, SharedRounds

log = structlog.get_logger(__name__)

INPUT_KEY = "approval"
CHOICES = {"allow_once": "allowed once", "allow_session": "allowed for this {scope}", "deny": "denied"}


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


def question(spec: ToolSpec, arguments: Mapping[str, Any]) -> str:
    """What the user is asked of a call: its arguments (the model's) `safe`, shown as they are."""
    shown = safe(arguments_line(arguments, ARGUMENTS_SHOWN))
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
    # allowed for longer than this call: for the rest of this run too, which a durable run keeps across a resume
    return Verdict(decision != "deny", CHOICES[str(decision)].format(scope=scope), for_run=decision == "allow_session")


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
    """Tools the user allowed "for this session", per MCP session and subject (a session's id presented with
    another subject's credentials inherits nothing); forgotten when the session is."""

    def __init__(self) -> None:
        self._by_session: weakref.WeakKeyDictionary[Connection, dict[str, set[str]]] = weakref.WeakKeyDictionary()

    def of(self, ctx: Context, subject: str) -> set[str]:
        return self._by_session.setdefault(session_connection(ctx), {}).setdefault(subject, set())


def session_connection(ctx: Context) -> Connection:
    """The SDK's `Connection` behind `ctx`, which lives as long as the MCP session (one per 2025-11-25 session)."""
    return connection_of(ctx.session)


def connection_of(session: ServerSession) -> Connection:
    """The SDK's `Connection` behind a request's `session` (host_logs and subscriptions key their sessions by it too).

    The SDK builds a new `ServerSession` for every request and gives no public handle on the connection behind it,
    so this is meta-agent's one read of an SDK internal; tests/front/test_approvals.py::test_the_session_connection_*
    fails when an SDK release moves it.

    Raises:
        TypeError: the installed SDK no longer keeps the connection where this reads it.
    """
    connection = getattr(session, "_connection", None)
    if not isinstance(connection, Connection):
        raise TypeError(
            "this mcp SDK keeps no Connection in ServerSession._connection; "
            "meta_agent.front.approvals.asking.connection_of needs updating for it"
        )
    return connection


class LiveApprover:
    """Asks through a live `elicitation/create` on a 2025-11-25 session."""

    def __init__(self, ctx: Context, allowed: set[str]) -> None:
        self._ctx = ctx
        self._allowed = allowed

    def remembered(self, spec: ToolSpec) -> str | None:
        return "for this session" if spec.name in self._allowed else None

    async def ask(self, spec: ToolSpec, arguments: Mapping[str, Any]) -> Verdict:
        verdict = await self.question(spec, arguments)
        self.keep(spec, verdict)
        return verdict

    async def question(self, spec: ToolSpec, arguments: Mapping[str, Any]) -> Verdict:
        """The user's answer, not yet remembered (`keep` remembers it: the run view's approver keeps only the answer
        that was taken)."""
        try:
            result = await self._ctx.session.elicit_form(
                question(spec, arguments), SCHEMA, related_request_id=self._ctx.request_context.request_id
            )
        except MCPError as exc:
            return Verdict(False, f"could not ask the user: {exc.message}")
        return verdict_of(result)

    def keep(self, spec: ToolSpec, verdict: Verdict) -> None:
        """Remember `verdict` for the rest of the session, if it says so."""
        if remembers(verdict):
            self._allowed.add(spec.name)


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


# One call's run: its progress sink, the approver of the loop (None: nobody to ask), whoever answers its children's
# questions (None: they are declined) and the host's own model (None: the caller lends none).
Work = Callable[[Sink, Approver | None, Questions | None, Provider | None], Awaitable[t.CallToolResult]]


class ParkedApprover:
    """The loop's approver in a parked run: each question is one more round of the call (`ParkedRun.ask`)."""

    def __init__(self, run: ParkedRun, allowed: set[str], scope: str) -> None:
        self._run = run
        self._allowed = allowed  # shared with later runs of the same session or conversation
        self._scope = scope  # what "allow_session" lasts for: "session" or "conversation"

    def remembered(self, spec: ToolSpec) -> str | None:
        return f"for this {self._scope}" if spec.name in self._allowed else None

    async def ask(self, spec: ToolSpec, arguments: Mapping[str, Any]) -> Verdict:
        verdict = await self.question(spec, arguments)
        self.keep(spec, verdict)
        return verdict

    async def question(self, spec: ToolSpec, arguments: Mapping[str, Any]) -> Verdict:
        """The caller's answer, not yet remembered (as LiveApprover.question)."""
        form = t.ElicitRequestFormParams(message=question(spec, arguments), requested_schema=schema(self._scope))
        response = await self._run.ask(INPUT_KEY, t.ElicitRequest(params=form))
        return verdict_of(response if isinstance(response, t.ElicitResult) else None, self._scope)

    def keep(self, spec: ToolSpec, verdict: Verdict) -> None:
        """Remember `verdict` for the rest of the session or conversation, if it says so."""
        if remembers(verdict, self._scope):
            self._allowed.add(spec.name)


class ParkedRuns:
    """The parked runs of 2026-07-28 callers that can be asked, run in a task group the server's lifespan owns.

    With `shared` (replicas on one PostgreSQL database) a retry answering a run parked on another replica is taken
    here: its answer goes to that run through the database, and this round reports that run's progress and returns
    its next question or its result (meta_agent.store.parking)."""

    def __init__(self, tg: anyio.abc.TaskGroup, shared: SharedRounds | None = None, *, max_parked: int) -> None:
        """`max_parked`: how many runs may wait for an answer at once (META_AGENT_MAX_PARKED)."""
        self._tg = tg
        self._shared = shared
        self._runs: dict[str, ParkedRun] = {}
        self.spaces = ParkingSpaces(max_parked)

    async def drive(
        self, ctx: Context, work: Work, allowed: set[str], scope: str, owner: str
    ) -> t.CallToolResult | t.InputRequiredResult:
        """One round of `owner`'s call: start the run (first call) or resume it with the caller's answer (a retry);
        then wait for its next question or its result. A new run remembers what the user allows "for this `scope`"
        in `allowed` (a retry goes on with its run's own). A retry of another owner's run is told the question is no
        longer pending, as one of a run that ended is."""
        after = 0
        if ctx.request_state:
            parked_id, _, seq = ctx.request_state.partition(":")
            if not seq.isdigit():
                return tool_error(NO_LONGER_PENDING)
            after = int(seq)
            responses = ctx.input_responses or {}
            found = self._runs.get(parked_id)
            if found is not None and found.owner != owner:
                return tool_error(NO_LONGER_PENDING)
            if found is None:
                if self._shared is None:
                    return tool_error(NO_LONGER_PENDING)
                return await self._elsewhere(ctx, parked_id, after, responses, owner)
            if (why := await self._answer(found, after, responses)) is not None:
                return tool_error(why)
            run = found
        else:
            run = self._start(ctx, work, allowed, scope, owner)
        progress = Progress(ctx, ticks=run.ticks)
        try:
            outcome = await run.next_round(progress, after)
        finally:
            progress.close()
        return outcome if isinstance(outcome, t.CallToolResult) else outcome.round(run.id)

    def _start(self, ctx: Context, work: Work, allowed: set[str], scope: str, owner: str) -> ParkedRun:
        """A new run, its approvals asked in rounds where the caller can elicit, its children's questions too
        (`ParkedRun` answers them), and its model's turns where the caller lends its model."""
        elicits = can_elicit(ctx)
        run = ParkedRun(
            self.spaces, sampling=declares_sampling(ctx), elicitation=elicits, shared=self._shared, owner=owner
        )
        self._runs[run.id] = run
        approver = ParkedApprover(run, allowed, scope) if elicits else None
        model = asked_model(run.ask) if lends_model(ctx) else None
        self._tg.start_soon(run.execute, partial(work, run.emit, approver, run, model), partial(self._ended, run))
        return run

    def _ended(self, run: ParkedRun) -> None:
        """Forget the ended `run`; but one that ended on an answer given in the run view, while its caller had not
        come back with its own, is kept until the caller comes back (its late answer collects the result), for as
        long as a question waits at most."""
        if not run.withdrawn:
            self._runs.pop(run.id, None)
            return

        async def later() -> None:
            await anyio.sleep(PARK_TIMEOUT)
            self._runs.pop(run.id, None)

        self._tg.start_soon(later)

    async def _answer(self, run: ParkedRun, seq: int, responses: Mapping[str, t.InputResponse]) -> str | None:
        """Give question `seq` of a run parked here the caller's `responses`; or why it cannot be answered. Where
        rounds are shared, the database takes the answer first: a retry of the same round through another replica
        must not answer it too."""
        if run.was_withdrawn(seq):  # answered in the run view meanwhile: the call goes on, the late answer unused
            return None
        if (why := run.can_answer(seq)) is not None:
            return why
        if self._shared is not None:
            try:
                if await self._shared.answer(run.id, seq, _dumped(responses), run.owner) is not None:
                    return ANSWERED
            except self._shared.database.errors as exc:
                log.warning("parked_answer_not_shared", parked=run.id, error=str(exc))
        return None if run.answer(seq, responses) else ANSWERED

    async def _elsewhere(
        self, ctx: Context, parked_id: str, seq: int, responses: Mapping[str, t.InputResponse], owner: str
    ) -> t.CallToolResult | t.InputRequiredResult:
        """Answer question `seq` of `owner`'s run parked on another replica, and wait for its next outcome here."""
        assert self._shared is not None
        shared = self._shared

        async def report(tick: int, message: str) -> None:
            await ctx.report_progress(tick, None, message)

        try:
            try:
                refused, outcome, run_id = await shared.answer_and_follow(
                    parked_id, seq, _dumped(responses), owner, report
                )
            except anyio.get_cancelled_exc_class():  # the caller gave up on this round: stop the run
                with anyio.CancelScope(shield=True):
                    await shared.notify(Note(parked_id, "cancel"))
                raise
            if refused is not None:
                return tool_error(NO_LONGER_PENDING if refused == "gone" else ANSWERED)
        except shared.database.errors as exc:
            return tool_error(f"cannot reach the database the replicas share ({shared.database.label}): {exc}")
        if outcome is None:
            where = f"; read meta-agent://runs/{run_id} for how its run ended" if run_id else ""
            return tool_error(f"the replica running this call stopped before the call ended{where}")
        if outcome.final:
            return t.CallToolResult.model_validate(outcome.body)
        return t.InputRequiredResult.model_validate(outcome.body)


def _dumped(responses: Mapping[str, t.InputResponse]) -> dict[str, Any]:
    return {key: response.model_dump(mode="json", by_alias=True) for key, response in responses.items()}
