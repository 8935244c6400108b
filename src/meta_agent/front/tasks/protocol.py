"""MCP tasks on the wire, in both protocol eras (README, Tasks); what a task is and does is
meta_agent.front.tasks.board's.

- 2025-11-25 (the core's experimental tasks): the server declares the `tasks` capability, and `agent` and `plan` say
  `execution.taskSupport: optional` in `tools/list`; a `tools/call` with a `task` gets a `CreateTaskResult` at once;
  `tasks/get`, `tasks/result` (which waits for the end, putting the task's questions to the caller as
  `elicitation/create` requests on its own stream), `tasks/list` and `tasks/cancel` serve it. The SDK checks every
  `tools/call` result of this era against `CallToolResult`, so a server middleware (`LegacyTasks`) answers these
  calls, and adds what the SDK does not declare to `initialize` and `tools/list`.
- 2026-07-28 (the extension `io.modelcontextprotocol/tasks`, `TasksExtension`): a `tools/call` whose request declares
  the extension gets a task (`resultType: "task"`); `tasks/get` (with `inputRequests` while the task waits for
  answers, its result once completed), `tasks/update` (the answers) and `tasks/cancel` serve it; `Mcp-Name`, where
  given, must name the task. A request that does not declare the extension never gets a task.

The call itself is made by the server (`MetaAgentServer.call_tool`), which starts a task where `PENDING` asks for one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, cast

import mcp.types as t
import structlog
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension
from mcp.server.lowlevel.server import Server
from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import decode_header_value
from mcp.shared.message import ServerMessageMetadata
from mcp_types.jsonrpc import HEADER_MISMATCH, MISSING_REQUIRED_CLIENT_CAPABILITY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field, ValidationError
from starlette.requests import Request

from meta_agent.front.approvals.parked import CallerRequest
from meta_agent.front.call_guard import unknown
from meta_agent.front.tasks.board import POLL_SECONDS, TASK_TOOLS, TaskBoard, TaskRefused, TaskView

log = structlog.get_logger(__name__)

EXTENSION = "io.modelcontextprotocol/tasks"
LEGACY = "2025-11-25"  # the one handshake era with tasks in the core
RELATED = "io.modelcontextprotocol/related-task"
CAPABILITY: dict[str, Any] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
POLL_MS = int(POLL_SECONDS * 1000)


@dataclass
class Pending:
    """A call that is to become a task (`ttl_ms` as its caller asked), and the task once made."""

    ttl_ms: int | None
    made: TaskView | None = None


PENDING: ContextVar[Pending | None] = ContextVar("meta_agent_pending_task", default=None)


class UpdateTaskParams(t.RequestParams):
    """`tasks/update` (2026-07-28): a task's answers, each under its question's key."""

    task_id: str
    input_responses: t.InputResponses = Field(default_factory=dict)


Board = Callable[[ServerRequestContext[Any, Any]], tuple[TaskBoard, str]]  # a request's board, and its owner


Offered = Callable[[str, ServerRequestContext[Any, Any]], Awaitable[object | None]]  # the tool, if the caller has it


class LegacyTasks:
    """The server middleware of 2025-11-25 tasks: declares them, and answers a task-augmented `tools/call`. A tool
    the caller is not offered is unknown (-32602), as without `task`; one it is offered that takes no task is a
    method not found (-32601), as the tasks spec says."""

    def __init__(self, offered: Offered) -> None:
        self._offered = offered

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "initialize":
            result = cast(dict[str, Any], await call_next(ctx))
            if result.get("protocolVersion") == LEGACY:
                result.setdefault("capabilities", {})["tasks"] = CAPABILITY
            return result
        if ctx.protocol_version != LEGACY:
            return await call_next(ctx)
        if ctx.method == "tools/list":
            result = cast(dict[str, Any], await call_next(ctx))
            for tool in result.get("tools", []):
                if tool.get("name") in TASK_TOOLS:
                    tool["execution"] = {"taskSupport": "optional"}
            return result
        params = ctx.params if isinstance(ctx.params, Mapping) else {}
        if ctx.method != "tools/call" or params.get("task") is None:
            return await call_next(ctx)
        name = params.get("name")
        if not isinstance(name, str) or await self._offered(name, ctx) is None:
            raise unknown("tool", str(name))
        if name not in TASK_TOOLS:
            raise MCPError(t.METHOD_NOT_FOUND, f"{name} does not run as a task: call it without `task`")
        ttl = params["task"].get("ttl") if isinstance(params["task"], Mapping) else None
        made = await _made(ctx, call_next, ttl if isinstance(ttl, int) and not isinstance(ttl, bool) else None)
        return made if isinstance(made, dict) else {"task": legacy_task(made)}


class TasksExtension(Extension):
    """The 2026-07-28 tasks extension: a call of `agent` or `plan` whose request declares it becomes a task."""

    identifier = EXTENSION

    async def intercept_tool_call(
        self, params: t.CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if params.name not in TASK_TOOLS or not _declares(ctx):
            return await call_next(ctx)
        made = await _made(ctx, call_next, None)
        return made if not isinstance(made, TaskView) else {**modern_task(made), "resultType": "task"}


async def _made(ctx: ServerRequestContext[Any, Any], call_next: CallNext, ttl_ms: int | None) -> Any:
    """The call made as a task: the task, or (it failed before one was made: an unknown argument) its result."""
    pending = Pending(ttl_ms)
    token = PENDING.set(pending)
    try:
        result = await call_next(ctx)
    finally:
        PENDING.reset(token)
    return result if pending.made is None else pending.made


def install(server: Server[Any], board: Board, offered: Offered) -> None:
    """The `tasks/*` methods of both eras, and the middleware of 2025-11-25 tasks, on `server`; `offered` finds the
    tool a caller names, as the caller is offered it."""
    server.middleware.append(LegacyTasks(offered))
    handlers = TaskMethods(board)
    server.add_request_handler("tasks/get", t.GetTaskRequestParams, handlers.get)
    server.add_request_handler("tasks/result", t.GetTaskPayloadRequestParams, handlers.result)
    server.add_request_handler("tasks/list", t.PaginatedRequestParams, handlers.list)
    server.add_request_handler("tasks/cancel", t.CancelTaskRequestParams, handlers.cancel)
    server.add_request_handler("tasks/update", UpdateTaskParams, handlers.update)


class TaskMethods:
    """The handlers of `tasks/*`; each method answers in the shape of the request's era."""

    def __init__(self, board: Board) -> None:
        self._board = board

    async def get(self, ctx: ServerRequestContext[Any, Any], params: t.GetTaskRequestParams) -> dict[str, Any]:
        modern = _era(ctx, "tasks/get", params.task_id)
        view = await self._view(ctx, params.task_id, whole=modern)  # 2025-11-25's status carries no result
        return modern_detail(view) if modern else legacy_task(view)

    async def result(
        self, ctx: ServerRequestContext[Any, Any], params: t.GetTaskPayloadRequestParams
    ) -> dict[str, Any]:
        if _era(ctx, "tasks/result", params.task_id, modern=False):
            raise _not_found("tasks/result")
        board, owner = self._board(ctx)
        view = await _refusing(board.settled(owner, params.task_id, lambda request: _ask(ctx, params.task_id, request)))
        if view is None:
            raise _unknown(params.task_id)
        if view.status != "done" or view.result is None:
            code = t.INVALID_PARAMS if view.status == "cancelled" else t.INTERNAL_ERROR
            raise MCPError(code, f"task {view.task_id} has no result: {view.message or view.status}")
        result = view.result.model_dump(mode="json", by_alias=True, exclude_none=True)
        result.pop("resultType", None)  # 2026-07-28's; a 2025-11-25 CallToolResult has none
        return {**result, "_meta": {**result.get("_meta", {}), RELATED: {"taskId": view.task_id}}}

    async def list(self, ctx: ServerRequestContext[Any, Any], params: t.PaginatedRequestParams) -> dict[str, Any]:
        if _era(ctx, "tasks/list", None, modern=False):
            raise _not_found("tasks/list")
        cursor = params.cursor
        if cursor is not None and (len(cursor) != 26 or not cursor.isalnum()):
            raise MCPError(t.INVALID_PARAMS, f"tasks/list: unknown cursor {cursor[:40]!r}")
        board, owner = self._board(ctx)
        views, after = await _refusing(board.page(owner, cursor))
        return {"tasks": [legacy_task(view) for view in views], **({"nextCursor": after} if after else {})}

    async def cancel(self, ctx: ServerRequestContext[Any, Any], params: t.CancelTaskRequestParams) -> dict[str, Any]:
        modern = _era(ctx, "tasks/cancel", params.task_id)
        board, owner = self._board(ctx)
        cancelled = await _refusing(board.cancel(owner, params.task_id))
        if cancelled is None:
            raise _unknown(params.task_id)
        view, now = cancelled
        if modern:
            return {}
        if not now:
            raise MCPError(t.INVALID_PARAMS, f"task {view.task_id} has ended already ({legacy_status(view)})")
        return legacy_task(view)

    async def update(self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams) -> dict[str, Any]:
        if not _era(ctx, "tasks/update", params.task_id):
            raise _not_found("tasks/update")
        board, owner = self._board(ctx)
        if not await _refusing(board.answer(owner, params.task_id, params.input_responses)):
            raise _unknown(params.task_id)
        return {}

    async def _view(self, ctx: ServerRequestContext[Any, Any], task_id: str, *, whole: bool = False) -> TaskView:
        board, owner = self._board(ctx)
        view: TaskView | None = await _refusing(board.view(owner, task_id, whole=whole))
        if view is None:
            raise _unknown(task_id)
        return view


def _era(ctx: ServerRequestContext[Any, Any], method: str, task_id: str | None, *, modern: bool = True) -> bool:
    """Whether the request is of 2026-07-28 (False: 2025-11-25). A request of an era without tasks gets "method not
    found"; a 2026-07-28 one that does not declare the extension, -32021; one whose `Mcp-Name` names another task,
    -32020."""
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        if not modern:
            return True
        if not _declares(ctx):
            raise MCPError(
                MISSING_REQUIRED_CLIENT_CAPABILITY,
                f"{method}: the request does not declare the extension {EXTENSION}",
                {"requiredCapabilities": {"extensions": {EXTENSION: {}}}},
            )
        header = ctx.request.headers.get("mcp-name") if isinstance(ctx.request, Request) else None
        named = decode_header_value(header)  # a value that is not plain ASCII comes base64-wrapped
        if header is not None and task_id is not None and named != task_id:
            raise MCPError(HEADER_MISMATCH, f"{method}: the Mcp-Name header names another task than taskId")
        return True
    if ctx.protocol_version != LEGACY:
        raise _not_found(method)
    return False


def _declares(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether a 2026-07-28 request declares the tasks extension (a 2025-11-25 one never does: it has its own)."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    capabilities = ctx.session.client_capabilities
    return capabilities is not None and EXTENSION in (capabilities.extensions or {})


async def _ask(ctx: ServerRequestContext[Any, Any], task_id: str, request: CallerRequest) -> t.InputResponse | None:
    """A task's question, sent to the caller on the stream of its `tasks/result` (2025-11-25); None: no answer came."""
    data = request.model_dump(mode="json", by_alias=True, exclude_none=True)
    data.setdefault("params", {})["_meta"] = {RELATED: {"taskId": task_id}}
    metadata = ServerMessageMetadata(related_request_id=ctx.request_id)
    try:
        if isinstance(request, t.ElicitRequest):
            return await ctx.session.send_request(
                t.ElicitRequest.model_validate(data), t.ElicitResult, metadata=metadata
            )
        return await ctx.session.send_request(
            t.CreateMessageRequest.model_validate(data), t.CreateMessageResult, metadata=metadata
        )
    except (MCPError, ValidationError) as exc:  # the caller answered, with an error: turned down, as a live call's
        log.info("task_question_declined", task_id=task_id, error=str(exc))
        return t.ElicitResult(action="cancel")
    except RuntimeError as exc:  # it could not be sent: the question waits for the next `tasks/result`
        log.info("task_question_unanswered", task_id=task_id, error=str(exc))
        return None


async def relay_progress(ctx: Context, task_id: str, tick: int, message: str) -> None:
    """A task's progress on the token of the call that made it (2025-11-25), which stays valid while the task runs;
    sent on the connection's own stream, since that call has returned. A caller that cannot take it misses it."""
    meta = ctx.request_context.meta
    token = meta.get("progress_token") if meta is not None else None
    if token is None:
        return
    params = t.ProgressNotificationParams(
        progress_token=token, progress=tick, message=message, _meta={RELATED: {"taskId": task_id}}
    )
    try:
        await ctx.session.send_notification(t.ProgressNotification(params=params))
    except Exception as exc:  # a closed connection, or one with no stream of its own: the progress is dropped
        log.debug("task_progress_dropped", task_id=task_id, error=str(exc))


async def _refusing(work: Awaitable[Any]) -> Any:
    try:
        return await work
    except TaskRefused as exc:
        raise MCPError(t.INTERNAL_ERROR, str(exc)) from None


def _unknown(task_id: str) -> MCPError:
    """What a task id that is unknown, expired or another caller's gets: the same error."""
    return MCPError(t.INVALID_PARAMS, f"unknown task {task_id[:40]!r}")


def _not_found(method: str) -> MCPError:
    return MCPError(t.METHOD_NOT_FOUND, "Method not found", method)


def legacy_status(view: TaskView) -> str:
    """The 2025-11-25 status: a result that is a tool error is `failed` there."""
    if view.status == "done":
        return "failed" if view.result is not None and view.result.is_error else "completed"
    return "failed" if view.status == "lost" else view.status


def _message(view: TaskView) -> str | None:
    """The status message: the latest progress line, the question asked, or what a failed result says."""
    if view.questions:
        request = next(iter(view.questions.values()))
        return request.params.message if isinstance(request, t.ElicitRequest) else "the task asks for a completion"
    if view.status == "done" and view.result is not None and view.result.is_error:
        return next((block.text for block in view.result.content if isinstance(block, t.TextContent)), None)
    return view.message


def _common(view: TaskView, status: str) -> dict[str, Any]:
    task: dict[str, Any] = {"taskId": view.task_id, "status": status, "createdAt": view.created}
    task["lastUpdatedAt"] = view.updated
    if (message := _message(view)) is not None:
        task["statusMessage"] = message
    return task


def legacy_task(view: TaskView) -> dict[str, Any]:
    """A task as 2025-11-25 shows it (`Task`)."""
    return {**_common(view, legacy_status(view)), "ttl": view.ttl_ms, "pollInterval": POLL_MS}


def modern_task(view: TaskView) -> dict[str, Any]:
    """A task as the 2026-07-28 extension shows it (its `Task`: `ttlMs`, `pollIntervalMs`)."""
    status = {"done": "completed", "lost": "failed"}.get(view.status, view.status)
    return {**_common(view, status), "ttlMs": view.ttl_ms, "pollIntervalMs": POLL_MS}


def modern_detail(view: TaskView) -> dict[str, Any]:
    """`tasks/get` of 2026-07-28: the task, with its questions while it waits for answers, its result once it is
    completed, and the error of one that failed."""
    detail = modern_task(view)
    if view.questions:
        detail["inputRequests"] = {
            key: request.model_dump(mode="json", by_alias=True, exclude_none=True)
            for key, request in view.questions.items()
        }
    if view.status == "done" and view.result is not None:
        detail["result"] = view.result.model_dump(mode="json", by_alias=True, exclude_none=True)
    if view.status == "lost":
        detail["error"] = {"code": t.INTERNAL_ERROR, "message": view.message or "the task ended without a result"}
    return detail
