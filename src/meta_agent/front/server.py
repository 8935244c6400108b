"""The MCP server: `ask`, `plan`, `agent` and `image_gen`, with progress, and the toolbox resource; served on stdio
by front.stdio.serve and over streamable HTTP as front.http.app's ASGI app.

The server's lifespan owns an `Engine` (the children's supervisors), and the server says which (`engine`) to the
HTTP health route. Each tool call runs the one loop with a progress reporter as its event sink; the reporter is closed
before the result is returned, so no notification can follow it.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager, nullcontext
from functools import partial
from pathlib import Path
from typing import Annotated, Any, cast

import anyio
import mcp.types as t
import structlog
from mcp.server import MCPServer
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceError, ToolError, UnexpectedToolError
from mcp.server.request_state import RequestStateSecurity
from mcp.shared.exceptions import MCPError
from pydantic import AnyUrl, Field, ValidationError

from meta_agent.config.servers import DEFAULT_START_TIMEOUT, ServerEntry
from meta_agent.config.settings import Settings
from meta_agent.core.provider import Provider
from meta_agent.engine import Engine
from meta_agent.errors import MetaAgentError
from meta_agent.front import run_resource, trace_context
from meta_agent.front.approvals.asking import ParkedRuns, SessionAllowances, is_modern
from meta_agent.front.approvals.parked import SharedKey
from meta_agent.front.apps.listing import UI_TOOLS, apps_for_ui_hosts, shows_apps
from meta_agent.front.apps.tools import apps_extension
from meta_agent.front.apps.views import AppViews
from meta_agent.front.auth.subjects import request_principal, subject_of
from meta_agent.front.call_guard import argument_error, unknown, unknown_argument, unless_caller_leaves
from meta_agent.front.calls import Front, front_of
from meta_agent.front.host_logs import HostLogs
from meta_agent.front.instructions import instructions
from meta_agent.front.run_tools import add_run_tools
from meta_agent.front.server_metrics import time_each_request
from meta_agent.front.subscriptions import ToolboxSubscribers, names_resource
from meta_agent.front.tasks import protocol as task_protocol
from meta_agent.front.tasks.board import TaskBoard, TaskRefused, TaskView
from meta_agent.front.tasks.protocol import PENDING, TasksExtension, relay_progress
from meta_agent.front.tasks.resumed import ResumedTasks
from meta_agent.front.tool_results import content_block, tool_error
from meta_agent.internal import internal_tools
from meta_agent.records.traces import Redactor
from meta_agent.shared.ids import random_ulid
from meta_agent.shared.unimported import hidden
from meta_agent.store.database import LOCAL_OWNER
from meta_agent.store.parking import SharedRounds
from meta_agent.store.tasks import TaskRows
from meta_agent.toolbox import TOOLBOX_URI
from meta_agent.toolbox.live import config_unusable
from meta_agent.version import __version__

log = structlog.get_logger(__name__)


class MetaAgentServer(MCPServer[Front]):
    """The SDK's MCPServer around one engine, which its lifespan starts (the children) and stops.

    `engine` is the running engine, None before the lifespan starts and after it ends (the HTTP health route reads
    it). Argument errors are one line naming the argument (unknown arguments included), and each call is cancelled
    when its HTTP caller goes away, on either era (meta_agent.front.call_guard).
    """

    def __init__(
        self,
        open_engine: Callable[[], Engine],
        *,
        hold_children: bool = False,
        shared_state: bool = False,
        config_problem: str | None = None,
    ) -> None:
        """`shared_state`: replicas share a PostgreSQL database, and with it the key that seals request states.
        `config_problem`: why servers.json could not be used, said in the instructions until the file is fixed."""
        self.engine: Engine | None = None
        self.front: Front | None = None  # what the lifespan holds, while it runs (the web console's views use it)
        self.hold_children = hold_children
        self._open_engine = open_engine
        self.subscribers = ToolboxSubscribers(TOOLBOX_URI)
        self._shared_key = SharedKey() if shared_state else None
        self._tools: dict[str, t.Tool] | None = None  # by name, as listed: made again when a tool is added or removed
        # The SDK's server sets up a rich log handler, which logging.basicConfig drops where logging is set up already
        # (by the command line, or the program that embeds us): rich need not be imported for it then.
        skip_rich = hidden("rich") if logging.getLogger().handlers else nullcontext()
        with skip_rich:
            super().__init__(
                "meta-agent",  # also the audience of sealed request states, the same on every replica
                version=__version__,
                instructions=instructions(config_unusable(config_problem, loaded=False) if config_problem else None),
                lifespan=self._lifespan,
                subscriptions=self.subscribers.bus,
                # a round's request state is its subject's: another subject retrying it is refused as if forged
                request_state_security=RequestStateSecurity(keys=[os.urandom(32)], bind_principal=request_principal)
                if self._shared_key is None
                else RequestStateSecurity(codec=self._shared_key, bind_principal=request_principal),
                extensions=[TasksExtension(), apps_extension()],
                # mcp.server.operation.duration; the apps' tools and views listed only to hosts that show them
                middleware=[time_each_request, apps_for_ui_hosts],
            )
        # MCPServer offers no public way to add a spec request handler.
        self.subscribers.install(self._lowlevel_server, partial(names_resource, self))
        task_protocol.install(self._lowlevel_server, _board, self.offered)
        trace_context.install(self._lowlevel_server)

    def children_held(self) -> bool:
        """Whether the children are held still (`hold_children`, and neither released nor the engine started)."""
        return self.hold_children and (self.engine is None or not self.engine.pool.released)

    def release_children(self) -> None:
        """Let the held children of the running engine start (`serve` on stdio: once the host has its first
        answer, so that their processes starting do not compete with it for the CPU)."""
        if self.engine is not None:
            self.engine.pool.release()

    @asynccontextmanager
    async def _lifespan(self, _server: MCPServer[Front]) -> AsyncIterator[Front]:
        engine = self._open_engine()
        engine.toolbox.on_change(self.subscribers.changed)
        engine.toolbox.on_change(partial(self._say_config_problem, engine))
        resumed = engine.runs.resumed = ResumedTasks()  # before the engine starts, which may resume runs at once
        async with engine, self._shared_rounds(engine) as shared, anyio.create_task_group() as background:
            self.engine = engine
            background.start_soon(self.subscribers.deliver)
            # what the views and results kept of runs ended long ago goes as their traces do: in the background, not
            # before serving
            background.start_soon(engine.runs.forget_ended, engine.settings.trace_max_age_days)
            try:
                settings = engine.settings
                parked = ParkedRuns(background, shared, max_parked=settings.max_parked)
                rows = TaskRows(engine.runs.database)
                tasks = TaskBoard(
                    background,
                    rows,
                    parked.spaces,
                    shared,
                    ttl_cap=settings.task_ttl,
                    max_tasks=settings.max_tasks,
                    events=engine.runs.events,
                    cancel_run=engine.runs.cancel_for_good if engine.runs.durable is not None else None,
                )
                resumed.serve(tasks)
                background.start_soon(tasks.sweep)
                views = AppViews(engine, background, max_runs=settings.max_tasks)
                # off HTTP the subject is the connection, which this lifespan serves (meta_agent.front.auth.subjects)
                self.front = Front(engine, parked, tasks, f"local:{random_ulid()}", SessionAllowances(), views)
                yield self.front
            finally:
                self.engine = None
                self.front = None
                background.cancel_scope.cancel()

    def _say_config_problem(self, engine: Engine) -> None:
        """The instructions the next `initialize` (or `server/discover`) reads: with servers.json's problem while it
        lasts. (MCPServer offers no public way to change them; its own handlers read this attribute.)"""
        self._lowlevel_server.instructions = instructions(engine.toolbox.config_problem)

    @asynccontextmanager
    async def _shared_rounds(self, engine: Engine) -> AsyncIterator[SharedRounds | None]:
        """The parked rounds every replica of a shared database sees, and the key they seal request states with."""
        if self._shared_key is None:
            yield None
            return
        async with engine.runs.shared_rounds(self._shared_key.use) as shared:
            if shared is not None:  # a task cancelled through another replica may be a run resumed here
                shared.cancel_elsewhere = engine.runs.cancel_resumed
            yield shared

    async def list_resource_templates(self) -> list[t.ResourceTemplate]:
        return [*await super().list_resource_templates(), run_resource.TEMPLATE]

    async def read_resource(
        self, uri: AnyUrl | str, context: Context[Any, Any] | None = None
    ) -> Iterable[ReadResourceContents] | t.InputRequiredResult:
        """A resource; meta-agent://runs/{run_id} is read here, as more than one content
        (meta_agent.front.run_resource)."""
        if (run_id := run_resource.run_id_in(str(uri))) is None:
            return await super().read_resource(uri, context)
        if self.engine is None:  # only a session reads resources, and sessions run inside the lifespan
            raise ResourceError("meta-agent is not running")
        request = context.request_context.request if context is not None else None
        return await run_resource.run_contents(self.engine.runs, run_id, subject_of(request, LOCAL_OWNER))

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> t.CallToolResult | t.InputRequiredResult:
        tool = await self.offered(name, context)
        if tool is None:
            raise unknown("tool", name)
        if problem := unknown_argument(name, arguments, tool.input_schema):
            raise ToolError(problem)
        if (pending := PENDING.get()) is not None and context is not None:
            start = partial(self._start_task, name, arguments, context, pending.ttl_ms)
            pending.made = await unless_caller_leaves(context, start)  # a caller gone first: its task never runs
            if pending.made is None:  # as below: nobody should read it, but never an empty success
                return tool_error("the caller went away; the call was cancelled")
            return t.CallToolResult(content=[])  # never sent: the task is (meta_agent.front.tasks.protocol)
        result = await unless_caller_leaves(context, partial(self._call, name, arguments, context))
        # Nobody reads this one: the SDK drops an answer to a closed stream.
        return result if result is not None else tool_error("the caller went away; the call was cancelled")

    async def offered(
        self, name: str, context: Context[Any, Any] | ServerRequestContext[Any, Any] | None
    ) -> t.Tool | None:
        """The tool `name` as the caller of `context` is offered it: None where it does not exist, or is an app's
        tool and the caller does not show apps (front/apps/listing.py); either is an unknown tool to it."""
        if name in UI_TOOLS and (context is None or not shows_apps(context)):
            return None
        if self._tools is None:  # each call looks its tool up: not made again from the registrations every time
            self._tools = {tool.name: tool for tool in await self.list_tools()}
        return self._tools.get(name)

    def add_tool(self, *args: Any, **kwargs: Any) -> None:
        self._tools = None
        super().add_tool(*args, **kwargs)

    def remove_tool(self, name: str) -> None:
        self._tools = None
        super().remove_tool(name)

    async def get_prompt(
        self, name: str, arguments: dict[str, Any] | None = None, context: Context[Any, Any] | None = None
    ) -> t.GetPromptResult | t.InputRequiredResult:
        """The SDK's, but a prompt that does not exist is the protocol error -32602 the spec says, not a handler's
        failure (which the SDK logs as a fault and answers with an invalid or internal error code)."""
        if not any(prompt.name == name for prompt in await self.list_prompts()):
            raise unknown("prompt", name)
        return await super().get_prompt(name, arguments, context)

    async def _call(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None
    ) -> t.CallToolResult | t.InputRequiredResult:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            # Only the caller's arguments failing the input schema; an UnexpectedToolError caused by a
            # ValidationError is ours (a structured result that fails our output schema) and stays a crash.
            if isinstance(exc.__cause__, ValidationError) and not isinstance(exc, UnexpectedToolError):
                raise ToolError(argument_error(name, exc.__cause__)) from exc.__cause__
            raise

    async def _start_task(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any], ttl_ms: int | None
    ) -> TaskView:
        """The call as a task, whose run goes on in the background after the call has answered.

        Raises:
            MCPError: the task cannot be made (META_AGENT_MAX_TASKS, the database).
        """
        front = front_of(context)

        async def call() -> t.CallToolResult:
            try:
                result = await self._call(name, arguments, context)
            except ToolError as exc:  # as the SDK answers a call whose tool raised it
                return tool_error(str(exc))
            return result if isinstance(result, t.CallToolResult) else tool_error("the run asked in the wrong way")

        caps = context.client_capabilities
        relay = None if is_modern(context) else partial(relay_progress, context)
        try:
            return await front.tasks.start(
                subject_of(context.request_context.request, front.owner),
                name,
                call,
                ttl_ms=ttl_ms,
                sampling=caps is not None and caps.sampling is not None,
                relay=relay,
            )
        except TaskRefused as exc:
            raise MCPError(t.INTERNAL_ERROR, str(exc)) from None


def _board(ctx: ServerRequestContext[Any, Any]) -> tuple[TaskBoard, str]:
    """The tasks, and who owns those of `ctx`'s caller."""
    front = cast(Front, ctx.lifespan_context)
    return front.tasks, subject_of(ctx.request, front.owner)


def build_server(
    settings: Settings,
    servers: Mapping[str, ServerEntry],
    environ: Mapping[str, str] = os.environ,
    *,
    trust_file: Path | None = None,
    provider: Provider | None = None,
    start_timeout: float = DEFAULT_START_TIMEOUT,
    config_file: Path | None = None,
    config_problem: str | None = None,
    hold_children: bool = False,
) -> MetaAgentServer:
    """The MCP server: the tools `ask`, `plan`, `agent` (and `image_gen` where its backend is configured), the toolbox
    resource and the run resources, over an engine made at each entry of its lifespan, which starts the children of
    `servers` (and leaving it stops them). `.run()` serves it on stdio; `http_app(server, host=...)` over HTTP.

    Args:
        settings: the `META_AGENT_*` settings.
        servers: the child servers by name (`load_servers(path, environ)`).
        environ: the process's own unless given; holds the providers' API keys and endpoints.
        trust_file: the levels recorded with `meta-agent trust`. One that cannot be read fails closed: its levels do
            not apply, and the toolbox resource says why.
        provider: where given, the model of every run instead of the one the settings name.
        start_timeout: seconds within which a child must answer, or it has failed to start (and is retried).
        config_file: where given, the servers.json `servers` came from: it is followed, and reloaded when it changes
            or `server.engine.toolbox.request_reload()` is called (SIGHUP); hosts subscribed to the toolbox resource
            hear of every change.
        config_problem: why `config_file` could not be used (`servers` is then empty): the server runs with no
            children and says it in its instructions, in each run's answer and in the toolbox resource, until the
            file, followed meanwhile, can be used.
        hold_children: the children start once `server.release_children()` is called (or a run needs them, or after
            a second; children/pool.py).

    Returns:
        The server, not yet started.

    Raises:
        ConfigError: META_AGENT_INTERNAL_TOOLS names an unknown tool (when the lifespan starts).
    """
    redact = Redactor.of(environ, servers, settings.http_token)  # for traces and host logs alike
    open_engine = partial(
        Engine,
        settings,
        servers,
        environ,
        trust_file=trust_file,
        provider=provider,
        start_timeout=start_timeout,
        config_file=config_file,
        config_problem=config_problem,
        redact=redact,
        serving=True,
        hold_children=hold_children,
    )
    server = MetaAgentServer(
        open_engine,
        hold_children=hold_children,
        shared_state=settings.database_url is not None,
        config_problem=config_problem,
    )
    add_run_tools(server)
    # Listed where the model would see it, no further: a tool that can only fail is not offered (the toolbox
    # resource says why it is withheld).
    if any(tool.name == "image_gen" for tool in internal_tools(settings, environ)[0]):
        _add_image_gen(server)
    _add_toolbox_resource(server)
    # Our log lines to the hosts that ask (`logging`), redacted as the engine's traces are.
    HostLogs(redact).install(server)
    return server


def _add_image_gen(server: MetaAgentServer) -> None:
    """The internal `image_gen` tool, also callable directly."""

    @server.tool(
        name="image_gen",
        title="Generate images",
        annotations=t.ToolAnnotations(read_only_hint=True, open_world_hint=True),
    )
    async def image_gen(
        prompt: Annotated[str, Field(description="What the image should show.")],
        ctx: Context,
        size: Annotated[str | None, Field(description="WIDTHxHEIGHT, e.g. 1024x1024, or auto.")] = None,
        n: Annotated[int | None, Field(description="How many images (default 1).", strict=True)] = None,
    ) -> t.CallToolResult:
        """Generate images from a text prompt; returns PNG images."""
        front = front_of(ctx)
        tool = front.engine.toolbox.internal_tool("image_gen")
        assert tool is not None and tool.run is not None
        arguments = {k: v for k, v in {"prompt": prompt, "size": size, "n": n}.items() if v is not None}
        try:
            outcome = await tool.run(arguments)
        except MetaAgentError as exc:
            return tool_error(str(exc))
        return t.CallToolResult(content=[content_block(part) for part in outcome.parts], is_error=outcome.is_error)


def _add_toolbox_resource(server: MetaAgentServer) -> None:
    """The resource meta-agent://toolbox, from which a host builds its tool selector."""

    @server.resource(TOOLBOX_URI, name="toolbox", mime_type="application/json")
    async def toolbox() -> str:
        """Every child with its status and protocol version, every tool with its annotations and trust level."""
        if server.engine is None:  # only a session reads resources, and sessions run inside the lifespan
            raise ResourceError("meta-agent is not running")
        return json.dumps(server.engine.toolbox.describe(), indent=2)
