"""What a durable run does when DBOS refuses to let it go on (durable/runs.py): an execution that lost its run (the
run was taken over by another replica while this one could not reach the database, or stalled) or whose run was
cancelled meanwhile. DBOS signals that with its control errors, BaseExceptions, which come out of the loop's task
groups wrapped in exception groups: unwrapped here, they stop that execution only, and its caller is told in one line
where the run is (`RunLost`); the replica serves on.

dbos is imported only on first use.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import TypeVar

from meta_agent.errors import MetaAgentError, summary

T = TypeVar("T")
TRACEBACK = "Traceback (most recent call last):"


class RunLost(MetaAgentError):
    """This execution of a run cannot go on: DBOS refused it (another replica took the run over, or it was
    cancelled meanwhile)."""

    def __init__(self, run_id: str, error: BaseException) -> None:
        where = f"meta-agent://runs/{run_id}"
        if type(error).__name__ == "DBOSWorkflowConflictIDError":
            why = f"was taken over by another replica, which finishes it; its result will be at {where}"
        else:
            why = f"stopped on this replica ({summary(error)}); {where} says how it is"
        super().__init__(f"run {run_id} {why}")


class Lost(BaseException):
    """A DBOS control error of a run that has a caller, carried past DBOS's workflow wrapper (which would have the
    caller wait for another execution's outcome for as long as that takes) to `DurableRuns.run`."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def is_cancel(error: BaseException) -> bool:
    """Whether `error` is DBOS refusing a step of a run that was cancelled meanwhile (through another replica)."""
    return type(error).__name__ == "DBOSWorkflowCancelledError"


def cancelled_error(run_id: str) -> BaseException:
    """What a resumed run cancelled by its caller raises out of its workflow: DBOS's own control error for a cancelled
    run, which DBOS takes as such (the run stays cancelled, and no error is logged for it)."""
    from dbos._error import DBOSWorkflowCancelledError

    return DBOSWorkflowCancelledError(f"run {run_id} was cancelled by its caller")


async def unwrapped(body: Awaitable[T], *, has_caller: bool) -> T:
    """`body`, with a DBOS control error it raises (this execution lost its run, or the run was cancelled) taken out
    of the exception groups of the loop's task groups, where DBOS would not find it: for a resumed run DBOS handles
    it (the execution stops and waits for the owner's outcome); for a run with a caller it is carried past DBOS
    (`Lost`)."""
    from dbos._error import DBOSBaseException

    try:
        return await body
    except BaseException as exc:
        found = _found(exc, DBOSBaseException)
        if found is None:
            raise
        if has_caller:
            raise Lost(found) from None
        raise found from None


def _found(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """`exc` if it is a `kind`, else the first `kind` within it (an exception group), else None."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        return next((found for inner in exc.exceptions if (found := _found(inner, kind)) is not None), None)
    return None


def without_traceback(record: logging.LogRecord) -> bool:
    """DBOS's line without the traceback it writes into some messages (polling its schedules through an outage):
    the exception's own line stands for it, and the log stays one line per event."""
    message = record.getMessage()
    if TRACEBACK in message:
        head, _, trace = message.partition(TRACEBACK)
        record.msg, record.args = head + (trace.strip().splitlines() or [""])[-1], None
    return True
