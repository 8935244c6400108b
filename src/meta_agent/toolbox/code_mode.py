"""A run's tools in code mode (core/code_mode.py): run_code first, its description listing the tools a program may
call, and the model shown run_code alone (with find_tools where the run searches) or beside its tools."""

from __future__ import annotations

import dataclasses

from meta_agent.core.code_mode import CodePlan, CodePlanKind
from meta_agent.core.tool_search import SearchPlan
from meta_agent.core.tools import FIND_TOOLS, RUN_CODE, ToolSpec
from meta_agent.internal.run_code import run_code_tool
from meta_agent.toolbox.live import LiveToolbox


def with_run_code(
    toolbox: LiveToolbox,
    tools: tuple[ToolSpec, ...],
    search: SearchPlan | None,
    kind: CodePlanKind,
    time_limit: float,
) -> tuple[tuple[ToolSpec, ...], SearchPlan | None, CodePlan | None]:
    """The run's `tools` and `search` with run_code among them, and the run's plan of code mode (None: `kind` is
    off). Where the run searches, run_code's description lists the tools shown from the start, and find_tools the
    rest; it is shown from the start itself. A program may run `time_limit` seconds."""
    if kind == "off":
        return tools, search, None
    listed = [spec for spec in tools if search is None or spec.name in search.shown]
    runner = run_code_tool(listed, searching=search is not None, time_limit=time_limit)
    spec = toolbox.internal_spec(runner)
    if search is not None:
        search = dataclasses.replace(search, shown=search.shown | {spec.name})
    first = tuple(found for found in tools if found.internal and found.name == FIND_TOOLS)
    rest = tuple(other for other in tools if other not in first and other.name != RUN_CODE)
    return (*first, spec, *rest), search, CodePlan(runner=runner, only=kind == "only")
