"""The `find_tools` internal tool: a query in, the best matching tools of the run's selection out, one line each
(README, Tool search). The tools it finds join the model's schema from its next turn (core.tool_search.ToolSearch).

It searches only the tools the run was given (its mode, the caller's `tools` patterns and trust already chose
them), so it never names a tool the run could not call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from meta_agent.core import tool_call
from meta_agent.core.messages import TextPart
from meta_agent.core.tools import FIND_TOOLS as NAME
from meta_agent.core.tools import NO_RUN, InternalTool, RunContext, ToolHints, ToolOutcome, ToolSpec
from meta_agent.shared.text import one_line

DEFAULT_LIMIT = 5
MAX_LIMIT = 20
_DESCRIPTION_CHARS = 200  # of a tool's description in a line: its schema, next turn, has the whole of it
NOT_ON = "find_tools: tool search is not on for this run; every tool the run may use is in your tool list"

FIND_TOOLS = InternalTool(
    name=NAME,
    description=(
        "Search the tools available to you by what you want to do, in a few keywords (e.g. 'create github issue', "
        "'query postgres table'). Returns the best matching tools, one per line: name, description, parameters. "
        "The tools found become callable from your next turn. Search again with other words if none fits."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What the tool should do, in keywords."},
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_LIMIT,
                "description": f"How many tools to return (default {DEFAULT_LIMIT}).",
            },
        },
        "required": ["query"],
    },
    # It only reads the run's own list of tools: read-only, so plan mode has it too.
    hints=ToolHints(title="Find tools", read_only_hint=True, destructive_hint=False, open_world_hint=False),
)


async def find_tools(arguments: Mapping[str, Any], context: RunContext = NO_RUN, /) -> ToolOutcome:
    """The matches for `query`, one line each, or an error result when the run does not search."""
    search = context.tool_search
    if search is None:
        return tool_call.error(NOT_ON)
    query = str(arguments.get("query", ""))
    found = search.find(query, int(arguments.get("limit", DEFAULT_LIMIT)))
    if not found:
        return ToolOutcome(parts=(TextPart(text=f"no tool matches {one_line(query, 100)!r}; try other words"),))
    lines = [line_of(spec) for spec in found]
    return ToolOutcome(parts=(TextPart(text="\n".join(lines)),))


def line_of(spec: ToolSpec) -> str:
    """`pg.query (call it pg__query): Run a SQL query. Parameters: sql: string, limit?: integer` — the name first, so
    a later turn of the conversation can read back what was found (core.tool_search.ToolSearch)."""
    call_as = "" if spec.alias == spec.name else f" (call it {spec.alias})"
    description = one_line(spec.description, _DESCRIPTION_CHARS) or "(no description)"
    return f"{spec.name}{call_as}: {description} Parameters: {parameters_of(spec.input_schema)}"


def parameters_of(schema: Mapping[str, Any]) -> str:
    """A schema's top-level parameters in short: `path: string, recursive?: boolean` (`?`: optional)."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or not properties:
        return "none"
    required = schema.get("required")
    needed = set(required) if isinstance(required, list) else set()
    return ", ".join(f"{name}{'' if name in needed else '?'}: {_type_of(prop)}" for name, prop in properties.items())


def _type_of(prop: Any) -> str:
    if not isinstance(prop, Mapping):
        return "any"
    kind = prop.get("type")
    if isinstance(kind, list):
        return "|".join(str(k) for k in kind)
    if "enum" in prop and isinstance(prop["enum"], list):
        return "|".join(repr(v) for v in prop["enum"][:6]) + ("|…" if len(prop["enum"]) > 6 else "")
    if kind == "array" and isinstance(prop.get("items"), Mapping):
        return f"{_type_of(prop['items'])}[]"
    return str(kind) if kind else "any"


def find_tools_tool() -> InternalTool:
    """find_tools with its backend (the run's search, handed over in its context)."""
    return dataclasses.replace(FIND_TOOLS, run=find_tools)
