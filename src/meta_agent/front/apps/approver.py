"""Approvals in the run view: the approver of a run whose caller's host shows its view (it declared the MCP Apps
extension), and of a run started from a view.

Each question is a row any replica reads (store/app_questions.py), so the view shows it with Approve and Deny wherever
it is read, and an answer given through any replica reaches the run. Where the caller can also be asked itself (an
elicitation, or a round of a parked call), both questions are put, and the first answer wins: the database takes one
answer per question, the other question is withdrawn (an elicitation is cancelled, which tells the host; a parked
round's question is dropped, and the caller's late answer to it only goes on with the call). A question nobody
answers within `WAIT_SECONDS` is denied.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import anyio
import structlog

from meta_agent.core.tool_call import Approver, Verdict
from meta_agent.core.tools import ToolSpec
from meta_agent.records.run_feed import shown_arguments
from meta_agent.shared.ids import random_ulid
from meta_agent.shared.text import one_line
from meta_agent.store.app_questions import AppQuestions, Settled

log = structlog.get_logger(__name__)
POLL_SECONDS = 1.0  # how often a question is looked up in the database: an answer given through another replica
WAIT_SECONDS = 900.0  # how long a question waits for an answer from the view alone, then is denied
UNANSWERED = f"denied: nobody answered within {WAIT_SECONDS / 60:g} minutes"
ENDED = "withdrawn: the run ended before it was answered"


@runtime_checkable
class Remembering(Protocol):
    """A caller's approver that can ask without remembering the answer, and remember it later (front/approvals):
    an "allow for this session" that lost to the view's answer must allow nothing."""

    async def question(self, spec: ToolSpec, arguments: Mapping[str, Any]) -> Verdict: ...

    def keep(self, spec: ToolSpec, verdict: Verdict) -> None: ...


class ViewAnswers:
    """The answers given through this process, which wake the question they answer at once (others are polled)."""

    def __init__(self) -> None:
        self._waiting: dict[tuple[str, str], anyio.Event] = {}

    def waiting(self, run_id: str, key: str) -> anyio.Event:
        return self._waiting.setdefault((run_id, key), anyio.Event())

    def done(self, run_id: str, key: str) -> None:
        self._waiting.pop((run_id, key), None)

    def answered(self, run_id: str, key: str) -> None:
        event = self._waiting.get((run_id, key))
        if event is not None:
            event.set()


class ViewApprover:
    """Asks in the run view, and through `inner` (the caller's own question) where there is one."""

    def __init__(
        self,
        inner: Approver | None,
        questions: AppQuestions,
        answers: ViewAnswers,
        *,
        run_id: str,
        owner: str,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        """`redact`: the traces' redaction, run over a question's arguments before they are kept, as over a trace."""
        self.redact = redact
        self.inner = inner
        self.questions = questions
        self.answers = answers
        self.run_id = run_id
        self.owner = owner

    def remembered(self, spec: ToolSpec) -> str | None:
        return None if self.inner is None else self.inner.remembered(spec)

    async def ask(self, spec: ToolSpec, arguments: Mapping[str, Any]) -> Verdict:
        key = random_ulid()
        try:
            # as the run's events show them: cut, safe and redacted (arguments may be 32 million characters long)
            shown = shown_arguments(arguments)[0]
            if self.redact is not None:
                shown = json.loads(self.redact(json.dumps(shown, ensure_ascii=False)))
            await self.questions.ask(self.run_id, key, self.owner, 0, spec.name, shown)
        except self.questions.database.errors as exc:  # the view cannot be asked: the caller may be
            log.warning("view_question_not_kept", run_id=self.run_id, error=one_line(str(exc), 300))
            if self.inner is not None:
                return await self.inner.ask(spec, arguments)
            return Verdict(False, f"could not ask in the run view: {one_line(str(exc), 200)}")
        verdict: Verdict | None = None
        try:
            async with anyio.create_task_group() as race:

                async def won(found: Verdict) -> None:
                    nonlocal verdict
                    verdict = found
                    race.cancel_scope.cancel()

                race.start_soon(self._from_view, key, won)
                if self.inner is not None:
                    race.start_soon(self._from_caller, key, spec, arguments, won)
        finally:
            self.answers.done(self.run_id, key)
            if verdict is None:  # cancelled: the run ends, and its question with it
                with anyio.CancelScope(shield=True):
                    await self._settle(key, Settled(allowed=False, answer=ENDED))
        assert verdict is not None
        return verdict

    async def _from_view(self, key: str, won: Any) -> None:
        """Wait for the view's answer: at once when given through this process, else found by polling."""
        event = self.answers.waiting(self.run_id, key)
        due = anyio.current_time() + WAIT_SECONDS
        woken = False
        while True:
            if woken:  # the answer woke it once already: one the database could not give back is polled for
                await anyio.sleep(POLL_SECONDS)
            else:
                with anyio.move_on_after(POLL_SECONDS):
                    await event.wait()
                woken = event.is_set()
            try:
                settled = await self.questions.answer_of(self.run_id, key)
            except self.questions.database.errors:
                settled = None  # polled again; the database may come back
            if settled is not None:
                await won(Verdict(settled.allowed, settled.answer))
                return
            if self.inner is None and anyio.current_time() >= due:
                settled, _ = await self._settle(key, Settled(allowed=False, answer=UNANSWERED))
                await won(Verdict(settled.allowed, settled.answer))
                return

    async def _from_caller(self, key: str, spec: ToolSpec, arguments: Mapping[str, Any], won: Any) -> None:
        """The caller's own answer, unless the view's was taken first (then that one stands)."""
        inner = self.inner
        assert inner is not None
        if isinstance(inner, Remembering):
            verdict = await inner.question(spec, arguments)
        else:
            verdict = await inner.ask(spec, arguments)
        settled, taken = await self._settle(key, Settled(allowed=verdict.allowed, answer=verdict.answer))
        if taken and isinstance(inner, Remembering):  # a late "allow for this session" that lost allows nothing
            inner.keep(spec, verdict)
        await won(verdict if taken else Verdict(settled.allowed, settled.answer))

    async def _settle(self, key: str, answer: Settled) -> tuple[Settled, bool]:
        """Give question `key` `answer` unless it has one: the answer it has, and whether it is `answer` (where the
        database cannot be reached, `answer`: the view cannot have answered either)."""
        try:
            settled = await self.questions.settle(self.run_id, key, None, answer)
        except self.questions.database.errors as exc:
            log.warning("view_answer_not_kept", run_id=self.run_id, error=one_line(str(exc), 300))
            return answer, True
        return settled or (answer, True)
