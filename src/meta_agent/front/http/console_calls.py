"""The web console's calls (`POST /ui/api/call`): the app-only tools of front/apps/tools.py, with exactly their
arguments and bounds (tests/front/test_console.py holds each model's schema to the MCP tool's input schema), checked
into the same one-line errors, and answered as the same CallToolResult, through the same `AppViews`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, Literal

import mcp.types as t
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from meta_agent.core.policy import TrustLevel
from meta_agent.core.result import Mode
from meta_agent.front.apps.views import AppViews, Caller, ViewError
from meta_agent.front.call_guard import argument_error, unknown_argument
from meta_agent.front.tool_results import tool_error
from meta_agent.store.run_events import MAX_CURSOR

REQUEST_ID_CHARS = 1000  # as app_run checks it


class _Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RunArguments(_Arguments):
    run_id: Annotated[str | None, Field(max_length=100)] = None
    request_id: str | int | None = None
    task: str | None = None
    after: Annotated[int, Field(ge=0, le=MAX_CURSOR)] = 0


class AnswerArguments(_Arguments):
    run_id: Annotated[str, Field(max_length=100)]
    key: Annotated[str, Field(max_length=100)]
    decision: Literal["approve", "deny"]


class RunsArguments(_Arguments):
    limit: Annotated[int, Field(ge=1, le=200)] = 50


class ToolboxArguments(_Arguments):
    pass


class SetToolArguments(_Arguments):
    name: Annotated[str, Field(max_length=300)]
    enabled: bool | None = None
    trust: TrustLevel | None = None


class SetModeArguments(_Arguments):
    mode: Mode


class StartArguments(_Arguments):
    task: Annotated[str, Field(min_length=1, max_length=100_000, pattern=r"\S")]
    mode: Mode = "agent"


@dataclass(frozen=True, kw_only=True)
class ConsoleTool:
    """A tool the console calls: its arguments, what it asks of the views, and the line said of its answer."""

    arguments: type[_Arguments]
    call: Callable[[AppViews, Caller, Any], Awaitable[dict[str, Any]]]
    say: Callable[[dict[str, Any]], str]


async def _run(views: AppViews, caller: Caller, a: RunArguments) -> dict[str, Any]:
    if isinstance(a.request_id, str) and len(a.request_id) > REQUEST_ID_CHARS:
        raise ViewError(f"request_id: longer than {REQUEST_ID_CHARS} characters")
    return await views.run(caller, run_id=a.run_id, request_id=a.request_id, task=a.task, after=a.after)


async def _answer(views: AppViews, caller: Caller, a: AnswerArguments) -> dict[str, Any]:
    return await views.answer(caller, run_id=a.run_id, key=a.key, allowed=a.decision == "approve")


async def _runs(views: AppViews, caller: Caller, a: RunsArguments) -> dict[str, Any]:
    return await views.runs(caller, a.limit)


async def _toolbox(views: AppViews, caller: Caller, _a: ToolboxArguments) -> dict[str, Any]:
    return await views.toolbox(caller)


async def _set_tool(views: AppViews, caller: Caller, a: SetToolArguments) -> dict[str, Any]:
    return await views.set_tool(caller, name=a.name, enabled=a.enabled, trust=a.trust)


async def _set_mode(views: AppViews, caller: Caller, a: SetModeArguments) -> dict[str, Any]:
    return await views.set_mode(caller, a.mode)


async def _start(views: AppViews, caller: Caller, a: StartArguments) -> dict[str, Any]:
    return await views.start(caller, task=a.task, mode=a.mode)


def _run_line(data: dict[str, Any]) -> str:
    status = "not started yet" if data["run"] is None else data["run"]["status"]
    return f"{len(data['events'])} events; the run is {status}"


def _tool_line(data: dict[str, Any]) -> str:
    return f"{data['name']}: {'on' if data['enabled'] else 'off'}, trust {data['trust']}"


TOOLS: dict[str, ConsoleTool] = {
    "app_run": ConsoleTool(arguments=RunArguments, call=_run, say=_run_line),
    "app_answer": ConsoleTool(arguments=AnswerArguments, call=_answer, say=lambda data: str(data["answer"])),
    "app_toolbox": ConsoleTool(arguments=ToolboxArguments, call=_toolbox, say=lambda _data: "the toolbox"),
    "app_set_tool": ConsoleTool(arguments=SetToolArguments, call=_set_tool, say=_tool_line),
    "app_set_mode": ConsoleTool(arguments=SetModeArguments, call=_set_mode, say=lambda data: f"mode {data['mode']}"),
    "app_start": ConsoleTool(arguments=StartArguments, call=_start, say=lambda data: f"run {data['run_id']} started"),
    "app_runs": ConsoleTool(arguments=RunsArguments, call=_runs, say=lambda data: f"{len(data['runs'])} runs"),
}


async def call_tool(views: AppViews, caller: Caller, name: str, arguments: dict[str, Any]) -> t.CallToolResult:
    """The result of the console's tool `name` (one of TOOLS) with `arguments`, as the MCP tool would answer: its
    data, or the one line of why not (an argument refused, or what the views cannot do)."""
    tool = TOOLS[name]
    unknown = unknown_argument(name, arguments, _schema(tool.arguments))
    if unknown is not None:
        return tool_error(unknown)
    try:
        checked = tool.arguments.model_validate(arguments)
    except ValidationError as exc:
        return tool_error(argument_error(name, exc))
    try:
        data = await tool.call(views, caller, checked)
    except ViewError as exc:
        return tool_error(str(exc))
    return t.CallToolResult(content=[t.TextContent(type="text", text=tool.say(data))], structured_content=data)


@cache
def _schema(model: type[_Arguments]) -> dict[str, Any]:
    return model.model_json_schema()
