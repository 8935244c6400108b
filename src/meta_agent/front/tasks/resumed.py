"""The caller of a durable run resumed here after its replica stopped (README, Replicas on PostgreSQL): where the run
is an MCP task's, its caller comes back with the task.

A run started by a plain call has lost its caller with the replica that ran it: nobody hears its progress, and a call
whose approval was not answered before is refused (its result says so). A task's caller, though, reads the task from
any replica: so the run resumed here becomes the task's run on this replica's board (`TaskBoard.carry`), as if it
had been made here: its progress is the task's status message, a call that needs approval makes the task
`input_required` (2025-11-25: put to the caller on the stream of its `tasks/result`; 2026-07-28: `inputRequests` of
`tasks/get`), answered through any replica, and a `tasks/cancel` stops it. "Allow for the rest" of an answer given
now lasts for the rest of the run: the session or conversation it was started in is the dead replica's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import mcp.types as t
import structlog

from meta_agent.core.result import RunResult
from meta_agent.core.run_spec import RunSpec
from meta_agent.engine.runs import NO_CALLER, Caller
from meta_agent.errors import MetaAgentError, RunCancelled
from meta_agent.front.approvals.asking import ParkedApprover
from meta_agent.front.tasks.board import TaskBoard, TaskRun
from meta_agent.front.tool_results import run_failed, run_result

log = structlog.get_logger(__name__)
SCOPE = "run"  # what "allow_session" lasts for in a resumed task's questions


class ResumedTasks:
    """The engine's hook for the durable runs resumed here (`Runs.resumed`): each one a task's runs as that task."""

    def __init__(self) -> None:
        self._board: TaskBoard | None = None
        self._ready = anyio.Event()

    def serve(self, board: TaskBoard) -> None:
        """The board resumed tasks join: until it is given, a resumed run waits (the server's lifespan makes it just
        after the engine has started, which may already be resuming runs)."""
        self._board = board
        self._ready.set()

    async def __call__(self, spec: RunSpec, body: Callable[[Caller], Awaitable[RunResult]]) -> RunResult:
        """The resumed run `spec`, its `body` run with the caller it has here.

        Raises:
            RunCancelled: the run was stopped before its end: its task was cancelled (through any replica), a question
                was not answered in time, or META_AGENT_MAX_PARKED runs wait already.
        """
        await self._ready.wait()
        board = self._board
        assert board is not None
        if (found := await board.owned(spec.run_id)) is None:
            return await body(NO_CALLER)
        owner, row = found
        ran: list[RunResult] = []
        failed: list[MetaAgentError] = []

        async def work(task: TaskRun) -> t.CallToolResult:
            approver = ParkedApprover(task.run, set(), SCOPE) if spec.can_ask else None
            try:
                result = await body(Caller(emit=task.emit, approver=approver, questions=task.run))
            except MetaAgentError as exc:  # its task's result says it, as a task made here would
                failed.append(exc)
                return run_failed(str(exc), [])
            ran.append(result)
            return run_result(result)

        log.info("task_resumed", task_id=row.task_id)
        await board.carry(owner, row, work)
        if failed:
            raise failed[0]
        if not ran:
            raise RunCancelled(spec.run_id)
        return ran[0]
