"""A child's questions during our calls to it (elicitation, sampling), passed on to whoever made those calls.

Our client declares both capabilities, so children offer the tools that ask; on 2026-07-28 children the SDK drives
the rounds of a question. A question is answered by our own caller where it can answer, and declined otherwise.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

import mcp.types as t
import structlog
from mcp.client import ClientRequestContext

from meta_agent.children.failures import describe_exception

log = structlog.get_logger(__name__)


class Questions(Protocol):
    """Answers a child's questions during a call by asking our own caller."""

    async def elicit(self, params: t.ElicitRequestFormParams) -> t.ElicitResult: ...

    async def sample(self, params: t.CreateMessageRequestParams) -> t.CreateMessageResult: ...


class QuestionRelay:
    """The elicitation and sampling callbacks of one child's client, and who may answer them now."""

    def __init__(self, server: str) -> None:
        self._server = server
        self._in_flight: list[Questions | None] = []  # who can answer for each call in flight (None: nobody)

    @contextmanager
    def calling(self, questions: Questions | None) -> Iterator[None]:
        """While a call is in flight: `questions` answers what the child asks meanwhile (None: nobody)."""
        self._in_flight.append(questions)
        try:
            yield
        finally:
            self._in_flight.remove(questions)

    async def elicit(
        self, context: ClientRequestContext, params: t.ElicitRequestParams
    ) -> t.ElicitResult | t.ErrorData:
        """A child asks our user something during a call: forward it to the caller of the call, or decline."""
        asker = self._asker()
        if asker is None or not isinstance(params, t.ElicitRequestFormParams):
            why = "nobody to ask" if asker is None else "url mode"
            log.info("child_question_declined", server=self._server, why=why)
            return t.ElicitResult(action="decline")
        try:
            return await asker.elicit(params)
        except Exception as exc:  # whatever went wrong asking, the child gets a clean decline
            log.warning("child_question_failed", server=self._server, error=describe_exception(exc))
            return t.ElicitResult(action="decline")

    async def sample(
        self, context: ClientRequestContext, params: t.CreateMessageRequestParams
    ) -> t.CreateMessageResult | t.ErrorData:
        """A child asks for a model completion during a call: forward it to our caller's model, or refuse."""
        asker = self._asker()
        if asker is None:
            return t.ErrorData(code=t.INVALID_REQUEST, message="meta-agent's caller cannot sample: nobody to ask")
        try:
            return await asker.sample(params)
        except Exception as exc:  # the child gets an error it can read, never a hang
            return t.ErrorData(code=t.INVALID_REQUEST, message=f"meta-agent's caller cannot sample: {exc}")

    def _asker(self) -> Questions | None:
        """Who can answer a question the child asks now. The protocol does not say which of our calls it belongs
        to, so with calls of different callers in flight nobody is asked: a question must not reach the wrong user."""
        callers = {id(q): q for q in self._in_flight}
        return next(iter(callers.values())) if len(callers) == 1 else None
