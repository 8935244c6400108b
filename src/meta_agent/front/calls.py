"""One call of `ask`, `plan` or `agent`: how its run meets its caller (live, parked between rounds, or as a task),
and what the server's lifespan holds for every call (`Front`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import mcp.types as t
import structlog
from mcp.server.mcpserver import Context

from meta_agent.children.questions import Questions
from meta_agent.core import events as ev
from meta_agent.core.provider import Provider
from meta_agent.core.result import Mode, RunResult
from meta_agent.core.tool_call import Approver
from meta_agent.engine import Engine
from meta_agent.errors import MetaAgentError, ModelNotConfigured, summary
from meta_agent.front.approvals.asking import (
    ForwardedQuestions,
    LiveApprover,
    ParkedApprover,
    ParkedRuns,
    SessionAllowances,
    Work,
    can_elicit,
    is_modern,
    over_http,
)
from meta_agent.front.apps.listing import shows_apps
from meta_agent.front.apps.views import AppViews, call_key
from meta_agent.front.auth.subjects import subject_of
from meta_agent.front.host_model import asked_model, declares_sampling, explained, lends_model, live_model
from meta_agent.front.progress import Progress
from meta_agent.front.tasks.board import CURRENT, TaskBoard, TaskRun
from meta_agent.front.tool_results import RunAnswer, run_failed, run_result, with_config_problem
from meta_agent.shared.ids import random_ulid
from meta_agent.store.database import LOCAL_OWNER

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Front:
    """What the lifespan holds: the engine, the parked runs of 2026-07-28 callers, the tasks, and what the user
    allowed "for this session": per MCP session (2025-11-25), and for 2026-07-28 callers off HTTP for the lifespan,
    which there serves one connection (stdio: the process, one user's session); over HTTP, per conversation, in the
    database (store/conversations.py). `owner`: the subject of the connection of callers off HTTP, which owns their
    tasks and parked rounds (their conversations and runs are the local user's: meta_agent.front.auth.subjects).
    `views`: what the apps and the console read and change (front/apps/views.py)."""

    engine: Engine
    parked: ParkedRuns
    tasks: TaskBoard
    owner: str
    allowances: SessionAllowances
    views: AppViews
    pipe_allowances: set[str] = field(default_factory=set)


def front_of(ctx: Context) -> Front:
    """What our lifespan yields (a tool's bare `Context` types it as a dict)."""
    return cast(Front, ctx.request_context.lifespan_context)


async def start_run(ctx: Context, mode: Mode, task: str, **arguments: Any) -> RunAnswer:
    """One run for a call of `ask`, `plan` or `agent`: parked between rounds for a 2026-07-28 caller that can be
    asked (approvals, the children's questions and the turns of its own model where it lends it come back as
    questions), else live, with progress and, where the caller can elicit, approvals; a 2025-11-25 caller gets the
    children's questions and its model's turns live. A call made a task (meta_agent.front.tasks.board) runs as that
    task's run: its questions wait, as a parked run's do, for the caller to read them from the task. The run, its
    conversation and what is allowed in it are the caller's subject's."""
    front = front_of(ctx)
    owner = subject_of(ctx.request_context.request, LOCAL_OWNER)  # of the run and its conversation, which outlive it
    connection = subject_of(ctx.request_context.request, front.owner)  # of its rounds and its session's grants
    elicits = can_elicit(ctx)
    parked = is_modern(ctx) and (elicits or declares_sampling(ctx))
    # "Allow for this session" of a parked run: over HTTP, where this era has no session, it holds for the
    # conversation (kept under the id the run returns when it starts one).
    per_conversation = parked and elicits and over_http(ctx)
    allowed = await _allowances(
        ctx, arguments.get("conversation_id"), owner, parked=parked, per_conversation=per_conversation
    )

    # The call's key, and the run's id made here: a host's app finds the run by the call, and its view asks by the id.
    arguments["call_key"] = call_key(connection, ctx.request_context.request_id)
    arguments["run_id"] = random_ulid()
    shown = shows_apps(ctx)

    async def work(
        emit: Callable[[ev.Event], Awaitable[None]],
        approver: Approver | None,
        questions: Questions | None,
        sampling: Provider | None,
    ) -> t.CallToolResult:
        if shown:  # its host shows the run view: the view asks too (the first answer wins), or alone
            approver = front.views.approver(approver, arguments["run_id"], owner)
        parts = {"approver": approver, "sampling": sampling, "questions": questions, "owner": owner}
        result = await _ran(ctx, mode, task, emit, **parts, **arguments)
        if not isinstance(result, t.CallToolResult):
            if per_conversation and result.conversation_id and allowed:
                await front.engine.runs.allow(result.conversation_id, allowed, owner)
            result = run_result(result)
        return with_config_problem(result, front.engine.toolbox.config_problem)  # each answer says it, while it lasts

    scope = "conversation" if per_conversation else "session"
    if (as_task := CURRENT.get()) is not None:
        arguments["run_id"] = as_task.id
        return await _as_task(ctx, as_task, work, ParkedApprover(as_task.run, allowed, scope))
    if parked:
        return await front.parked.drive(ctx, work, allowed, scope, connection)
    progress = Progress(ctx)
    live = None if is_modern(ctx) else ForwardedQuestions(ctx)  # a 2026-07-28 caller here cannot be asked
    try:
        return await work(progress, LiveApprover(ctx, allowed) if elicits else None, live, _live_model(ctx))
    finally:
        progress.close()


async def _ran(
    ctx: Context, mode: Mode, task: str, emit: Callable[[ev.Event], Awaitable[None]], **arguments: Any
) -> RunResult | t.CallToolResult:
    """The run of the call, and its result; or, where it failed, the one-line error the caller gets."""
    front = front_of(ctx)
    failed: list[RunResult] = []  # a run that failed says so in its last event, with its result

    async def watched(event: ev.Event) -> None:
        if isinstance(event, ev.RunFailed) and event.result is not None:
            failed.append(event.result)
        await emit(event)

    try:
        return await front.engine.run(task, mode=mode, emit=watched, **arguments)
    except ModelNotConfigured as exc:  # where the host could have lent its model, what it lacks to
        return run_failed(explained(str(exc), ctx, front.engine.models), failed)
    except MetaAgentError as exc:
        return run_failed(str(exc), failed)
    except Exception as exc:  # a bug of ours: one line for the caller, the traceback for the log
        log.exception("run_crashed", mode=mode)
        return run_failed(f"meta-agent failed: {summary(exc)} (the server log has details)", failed)
    except BaseException as exc:  # a library's control error (DBOS's): it ends this call, never the server
        if not _contained(exc):
            raise
        log.error("run_crashed", mode=mode, error=summary(exc))
        return run_failed(f"meta-agent failed: {summary(exc)} (the server log has details)", failed)


async def _as_task(ctx: Context, task: TaskRun, work: Work, approver: ParkedApprover) -> t.CallToolResult:
    """The call's run as the run of its `task`: its approvals (`approver`) and its children's questions wait for the
    caller to read them from the task, where the caller can elicit; a 2026-07-28 task's model turns are its questions
    too, a 2025-11-25 one's go on the session."""
    model = asked_model(task.run.ask) if is_modern(ctx) and lends_model(ctx) else _live_model(ctx)
    if not can_elicit(ctx):  # nobody to ask: the loop refuses what needs approval, the children are declined
        return await work(task.emit, None, None, model)
    return await work(task.emit, approver, task.run, model)


async def _allowances(
    ctx: Context, conversation_id: str | None, owner: str, *, parked: bool, per_conversation: bool
) -> set[str]:
    """The tools the user allowed "for this session", which the run's approvals add to: the conversation's
    (`per_conversation`); else a parked run's for the lifespan, which is the connection's (the SDK makes a Connection
    per 2026-07-28 request, so that cannot be the key); else the 2025-11-25 session's. None where nobody is asked."""
    front = front_of(ctx)
    if not can_elicit(ctx):
        return set()
    if per_conversation:
        return await front.engine.runs.allowed(conversation_id, owner)
    if parked:
        return front.pipe_allowances
    return front.allowances.of(ctx, subject_of(ctx.request_context.request, front.owner))


def _contained(exc: BaseException) -> bool:
    """Whether `exc` (no Exception) may end a call as an error: not a cancellation, an interrupt or an exit, nor a
    group holding one, which go on as they came."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_contained(inner) for inner in exc.exceptions)
    return not isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit, anyio.get_cancelled_exc_class()))


def _live_model(ctx: Context) -> Provider | None:
    """The host's own model on the session's back-channel, where this caller lends it and has one (2025-11-25)."""
    return live_model(ctx) if lends_model(ctx) and not is_modern(ctx) else None
