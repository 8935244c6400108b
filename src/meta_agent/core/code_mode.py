"""Code mode: the model writes a short program over the run's tools (`run_code`, internal/run_code.py) instead of
calling them one model turn at a time, and only what the program prints or returns goes back to the model.

Whether a run is in code mode (`code_on`), and how (`CodePlan`): its run_code with the backend that runs programs, and
whether the model sees run_code alone (with find_tools when tool search is on) or beside the run's other tools.
`CodeRunner` runs run_code itself, like core.tool_search.SearchingRunner runs find_tools; the calls a program makes
go back through the tool step as calls of their own (core/inner_calls.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from meta_agent.core.result import Mode
from meta_agent.core.tools import RUN_CODE, InternalTool, ProgressFn, RunContext, ToolOutcome, ToolSpec

if TYPE_CHECKING:  # the tool step imports this module's neighbours; this one is imported without it
    from meta_agent.core.tool_step import ToolRunner

CodeSetting = Literal["auto", "on", "off"]
CodePlanKind = Literal["off", "only", "beside"]  # no run_code; run_code alone; run_code beside the tools
# `auto` gives the model run_code alone above this many selected tools, as tool search starts (the same measure: a
# big toolbox's schemas cost more than a program's few lines); at or below it, run_code beside the tools.
AUTO_THRESHOLD = 30
# True while a program runs, in its task (and the tasks it starts) only: what a wrapper of the runner or the approver
# (a durable run's steps) needs to tell a program's calls from the model's own calls of the same turn.
_IN_PROGRAM: ContextVar[bool] = ContextVar("in_program", default=False)


@dataclass(frozen=True, kw_only=True)
class CodePlan:
    """How a run offers code mode: `runner` is run_code with its backend, `only`: the model sees run_code (and
    find_tools) and no other tool; otherwise run_code comes beside the tools, and the model chooses."""

    runner: InternalTool
    only: bool


def code_on(setting: CodeSetting, asked: bool | None, mode: Mode, selected: int) -> CodePlanKind:
    """How a run offers run_code: never in ask mode (one turn, internal tools only); the caller's `code` argument
    (`asked`) over the setting; `auto` alone above `AUTO_THRESHOLD` selected tools, else beside them."""
    if mode == "ask" or asked is False or (asked is None and setting == "off"):
        return "off"
    if asked or setting == "on":
        return "only"
    return "only" if selected > AUTO_THRESHOLD else "beside"


class CodeRunner:
    """The run's tool runner, with run_code run here by `runner`; every other call goes on to `inner` as it came (the
    tool step around it shows and records run_code like any call, and gives it the run's `call_tool`)."""

    def __init__(self, inner: ToolRunner, runner: InternalTool) -> None:
        self.inner = inner
        self.runner = runner

    async def call(
        self,
        spec: ToolSpec,
        arguments: Mapping[str, Any],
        on_progress: ProgressFn | None = None,
        *,
        context: RunContext,
    ) -> ToolOutcome:
        if spec.internal and spec.name == RUN_CODE and self.runner.run is not None:
            marked = _IN_PROGRAM.set(True)
            try:
                return await self.runner.run(arguments, context)
            finally:
                _IN_PROGRAM.reset(marked)
        return await self.inner.call(spec, arguments, on_progress, context=context)


def in_program() -> bool:
    """Whether the calling task is running a program of run_code (the call being made is one of its calls)."""
    return _IN_PROGRAM.get()
