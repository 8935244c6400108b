"""The tools `ask`, `plan` and `agent`: each call one run of the one loop (README, MCP tools), started by
meta_agent.front.calls; shown in the run view by hosts that show MCP Apps."""

from __future__ import annotations

from typing import Annotated, Any

import mcp.types as t
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from pydantic import AfterValidator, Field, WithJsonSchema

from meta_agent.front.apps.listing import RUN_VIEW
from meta_agent.front.calls import start_run
from meta_agent.front.tool_results import RunAnswer

RUN_VIEW_META = {"ui": {"resourceUri": RUN_VIEW}}  # hosts that show MCP Apps show the run in the run view
ToolPatterns = Annotated[
    list[str] | None,
    Field(description='Glob patterns over tool names ("time.*", "image_gen"); absent: every tool of the mode.'),
]

CodeMode = Annotated[
    bool | None,
    Field(
        description="Code mode: the model writes a short Python program over the tools (run_code), and only what it"
        " prints comes back to the model; best for many calls whose results feed each other. Absent: the server's"
        " setting (META_AGENT_CODE_MODE).",
        strict=True,
    ),
]


def _says_something(text: str) -> str:
    """A task or prompt with no word in it (empty, or only white space) is refused before a model turn is spent."""
    if not text.strip():
        raise ValueError("empty: say what to do")
    return text


# The refusal above, as the input schema tells hosts: at least one character that is not white space.
Said = Annotated[str, AfterValidator(_says_something), WithJsonSchema({"type": "string", "pattern": r"\S"})]


def add_run_tools(server: MCPServer[Any]) -> None:
    """`ask`, `plan` and `agent`: each a run of the one loop (README, MCP tools)."""

    @server.tool(
        title="Ask the model",
        meta=RUN_VIEW_META,
        annotations=t.ToolAnnotations(read_only_hint=True, open_world_hint=True),
    )
    async def ask(
        prompt: Annotated[Said, Field(description="What to ask.")],
        ctx: Context,
        tools: ToolPatterns = None,
    ) -> RunAnswer:
        """One model turn. The model may call one of meta-agent's internal tools once (those the toolbox lists:
        describe_image, and image_gen where an image backend is configured); never child tools."""
        return await start_run(ctx, "ask", prompt, patterns=tools)

    @server.tool(
        title="Plan a task",
        meta=RUN_VIEW_META,
        annotations=t.ToolAnnotations(read_only_hint=True, open_world_hint=True),
    )
    async def plan(
        task: Annotated[Said, Field(description="The task to plan.")],
        ctx: Context,
        tools: ToolPatterns = None,
        max_steps: Annotated[int | None, Field(description="Model turns at most (default 4).", strict=True)] = None,
        code: CodeMode = None,
    ) -> RunAnswer:
        """Look around with read-only tools only and return a numbered plan. Changes nothing."""
        return await start_run(ctx, "plan", task, patterns=tools, max_steps=max_steps, code=code)

    @server.tool(
        title="Run an agent",
        meta=RUN_VIEW_META,
        annotations=t.ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=True),
    )
    async def agent(
        task: Annotated[Said, Field(description="The task to carry out.")],
        ctx: Context,
        tools: ToolPatterns = None,
        max_steps: Annotated[int | None, Field(description="Model turns at most.", strict=True)] = None,
        token_budget: Annotated[int | None, Field(description="Input+output tokens at most.", strict=True)] = None,
        plan: Annotated[bool, Field(description="Write a numbered plan first, then carry it out.")] = False,
        conversation_id: Annotated[str | None, Field(description="Continue an earlier conversation.")] = None,
        code: CodeMode = None,
    ) -> RunAnswer:
        """Carry out a task with every enabled tool (internal and child), within step, token and time limits.
        Tools that change things run only with the user's approval (trust levels)."""
        if plan:
            task = f"{task}\n\nFirst write a short numbered plan, then carry it out step by step."
        return await start_run(
            ctx,
            "agent",
            task,
            patterns=tools,
            max_steps=max_steps,
            token_budget=token_budget,
            conversation_id=conversation_id,
            code=code,
        )
