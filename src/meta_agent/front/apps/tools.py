"""MCP Apps (the extension `io.modelcontextprotocol/ui`) on our server: the two views as `ui://` resources, the
`tools` tool that opens the tool selector, and the app-only tools the views call through their host
(`_meta.ui.visibility: ["app"]`), each a thin door onto front/apps/views.py.

`agent`, `plan` and `ask` name the run view themselves (front/server.py). A host that did not declare the extension
sees none of this (front/apps/listing.py, which names them all).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

import mcp.types as t
from mcp.server.apps import Apps
from mcp.server.mcpserver import Context
from pydantic import Field

from meta_agent.apps.pages import page
from meta_agent.core.policy import TrustLevel
from meta_agent.core.result import Mode
from meta_agent.front.apps.listing import OPENER, RUN_VIEW, TOOLS_VIEW
from meta_agent.front.apps.views import Caller, ViewError
from meta_agent.front.auth.subjects import subject_of
from meta_agent.front.calls import front_of
from meta_agent.front.tool_results import tool_error
from meta_agent.store.database import LOCAL_OWNER
from meta_agent.store.run_events import MAX_CURSOR

RequestId = Annotated[str | int | None, Field(description="The JSON-RPC id of the tools/call whose run to show.")]


def caller_of(ctx: Context) -> Caller:
    """Who calls: the subject owning runs and preferences, and its connection (meta_agent.front.auth.subjects)."""
    request = ctx.request_context.request
    return Caller(owner=subject_of(request, LOCAL_OWNER), connection=subject_of(request, front_of(ctx).owner))


def apps_extension() -> Apps:
    """The extension: the views, the opener and the app-only tools."""
    apps = Apps()
    apps.add_html_resource(RUN_VIEW, page("run"), name="run", title="meta-agent run", prefers_border=True)
    apps.add_html_resource(TOOLS_VIEW, page("tools"), name="tools", title="meta-agent tools", prefers_border=True)
    _add_opener(apps)
    _add_run_tools(apps)
    _add_selector_tools(apps)
    return apps


def _add_opener(apps: Apps) -> None:
    @apps.tool(resource_uri=TOOLS_VIEW, name=OPENER, title="Open the tool selector")
    async def tools(ctx: Context) -> t.CallToolResult:
        """Open meta-agent's tool selector: switch tools on and off, set their trust levels (never / ask / always),
        and start a task in ask, plan or agent mode."""
        return await _view(
            front_of(ctx).views.toolbox(caller_of(ctx)),
            lambda data: f"{_count(data)} tools of {len(data['servers'])} servers; the tool selector shows them.",
        )


def _add_run_tools(apps: Apps) -> None:
    @apps.tool(resource_uri=RUN_VIEW, visibility=["app"], name="app_run", title="Read a run")
    async def app_run(
        ctx: Context,
        run_id: Annotated[str | None, Field(description="The run to read.", max_length=100)] = None,
        request_id: RequestId = None,
        task: Annotated[str | None, Field(description="The task the call gave (tells runs apart).")] = None,
        after: Annotated[int, Field(description="The cursor: events after this one.", ge=0, le=MAX_CURSOR)] = 0,
    ) -> t.CallToolResult:
        """A run's events after a cursor, its pending approvals, and its result once done."""
        if isinstance(request_id, str) and len(request_id) > 1000:
            return tool_error("request_id: longer than 1000 characters")
        views = front_of(ctx).views
        return await _view(
            views.run(caller_of(ctx), run_id=run_id, request_id=request_id, task=task, after=after), _run_line
        )

    @apps.tool(resource_uri=RUN_VIEW, visibility=["app"], name="app_answer", title="Answer an approval")
    async def app_answer(
        ctx: Context,
        run_id: Annotated[str, Field(max_length=100)],
        key: Annotated[str, Field(max_length=100)],
        decision: Literal["approve", "deny"],
    ) -> t.CallToolResult:
        """Approve or deny a pending tool call of a run."""
        views = front_of(ctx).views
        answer = views.answer(caller_of(ctx), run_id=run_id, key=key, allowed=decision == "approve")
        return await _view(answer, lambda data: str(data["answer"]))

    @apps.tool(resource_uri=RUN_VIEW, visibility=["app"], name="app_runs", title="List runs")
    async def app_runs(ctx: Context, limit: Annotated[int, Field(ge=1, le=200)] = 50) -> t.CallToolResult:
        """The caller's newest runs."""
        return await _view(front_of(ctx).views.runs(caller_of(ctx), limit), lambda data: f"{len(data['runs'])} runs")


def _add_selector_tools(apps: Apps) -> None:
    @apps.tool(resource_uri=TOOLS_VIEW, visibility=["app"], name="app_toolbox", title="Read the tool selector")
    async def app_toolbox(ctx: Context) -> t.CallToolResult:
        """Every tool, as the caller chose them, and its mode."""
        return await _view(front_of(ctx).views.toolbox(caller_of(ctx)), lambda data: "the toolbox")

    @apps.tool(resource_uri=TOOLS_VIEW, visibility=["app"], name="app_set_tool", title="Choose a tool")
    async def app_set_tool(
        ctx: Context,
        name: Annotated[str, Field(max_length=300)],
        enabled: bool | None = None,
        trust: TrustLevel | None = None,
    ) -> t.CallToolResult:
        """Switch a tool on or off for the caller's later runs, or set its trust level."""
        views = front_of(ctx).views
        chosen = views.set_tool(caller_of(ctx), name=name, enabled=enabled, trust=trust)
        return await _view(
            chosen, lambda data: f"{data['name']}: {'on' if data['enabled'] else 'off'}, trust {data['trust']}"
        )

    @apps.tool(resource_uri=TOOLS_VIEW, visibility=["app"], name="app_set_mode", title="Choose the mode")
    async def app_set_mode(ctx: Context, mode: Mode) -> t.CallToolResult:
        """The mode the task box starts runs in."""
        return await _view(front_of(ctx).views.set_mode(caller_of(ctx), mode), lambda data: f"mode {mode}")

    @apps.tool(resource_uri=TOOLS_VIEW, visibility=["app"], name="app_start", title="Start a run")
    async def app_start(
        ctx: Context,
        task: Annotated[str, Field(min_length=1, max_length=100_000, pattern=r"\S")],
        mode: Mode = "agent",
    ) -> t.CallToolResult:
        """Start a run of a task; its view shows it, and asks there before tools that change things."""
        return await _view(
            front_of(ctx).views.start(caller_of(ctx), task=task, mode=mode),
            lambda data: f"run {data['run_id']} started",
        )


async def _view(work: Awaitable[dict[str, Any]], say: Callable[[dict[str, Any]], str]) -> t.CallToolResult:
    """The answer of a view's `work`: its data, and a line `say`s of it; or the one line of why it failed."""
    try:
        data = await work
    except ViewError as exc:
        return tool_error(str(exc))
    return t.CallToolResult(content=[t.TextContent(text=say(data))], structured_content=data)


def _run_line(data: dict[str, Any]) -> str:
    status = "not started yet" if data["run"] is None else data["run"]["status"]
    return f"{len(data['events'])} events; the run is {status}"


def _count(data: dict[str, Any]) -> int:
    return len(data["internal"]) + sum(len(server["tools"]) for server in data["servers"])
