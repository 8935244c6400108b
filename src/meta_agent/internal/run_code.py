"""The `run_code` internal tool of code mode (docs/code-mode.md): the model writes one short program that calls the
run's tools, and only what the program prints, and the value of its last expression, goes back to the model.

Its description lists the tools a program may call, each with a signature drawn from its schema. Inside the program,
`call_tool(name, arguments)` is a call the run makes as if the model had made it (RunContext.call_tool: selection, plan
mode, trust and approvals, progress, the trace, the run's limits); it returns the result's structured content where
the tool gives one, else its text, and raises an `Exception` the program may catch where the call failed or was
refused. The program runs in the sandbox of internal/sandbox.py.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

import anyio

from meta_agent.core import tool_call
from meta_agent.core.messages import TextPart
from meta_agent.core.tools import (
    NO_RUN,
    RUN_CODE,
    InnerCall,
    InternalTool,
    RunContext,
    ToolHints,
    ToolOutcome,
    ToolSpec,
)
from meta_agent.internal import sandbox
from meta_agent.shared.text import one_line

_DESCRIPTION_CHARS = 160  # of a tool's description in its line
MAX_CODE_CHARS = 50_000  # of a program: a short one is the point, and the model pays for every character it writes
_PRINTED_WITH_ERROR = 4_000  # of what a failed program printed, the last characters its error shows
_PYTHON_TYPES = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "array": "list",
    "object": "dict",
    "null": "None",
}

DESCRIPTION = """\
Run a short Python program that calls tools and works with their results, instead of calling them one by one. \
Inside it, call_tool(name, arguments) calls the tool `name` (its full name, as listed below) with a dict of \
arguments and returns its result: a dict where the tool gives structured content, else its text (a str; json.loads \
it when it is JSON). A failed or refused call raises an Exception, which the program may catch. Only what the \
program prints, and the value of its last expression, comes back to you: print just what you need. The sandbox is a \
subset of Python: no files, network or environment; import only pure modules (json, math, re, datetime, \
collections, itertools, functools, decimal); no clock (ask a tool for the time); time and memory are limited.
Example: totals = [call_tool("shop.get_order", {"id": i})["total"] for i in [1, 2, 3]]; print(sum(totals))
"""


def run_code_tool(
    tools: Sequence[ToolSpec], *, searching: bool, time_limit: float = sandbox.TIME_LIMIT
) -> InternalTool:
    """run_code, its description listing `tools` (the run's, but for run_code and find_tools), with its backend,
    whose programs may run `time_limit` seconds each; `searching`: the run has find_tools, whose finds a program may
    call too."""
    listed = [line_of(spec) for spec in tools if not (spec.internal and spec.name in (RUN_CODE, "find_tools"))]
    found = (
        "\nFind more tools with find_tools; a program may call any tool it finds, by its full name."
        if searching
        else ""
    )
    tools_text = "\n".join(listed) if listed else "(none listed)"
    return InternalTool(
        name=RUN_CODE,
        description=f"{DESCRIPTION}Tools (name(parameters) -> result):\n{tools_text}{found}",
        input_schema={
            "type": "object",
            "properties": {
                "code": {"type": "string", "description": "The Python program.", "maxLength": MAX_CODE_CHARS}
            },
            "required": ["code"],
            "additionalProperties": False,
        },
        # It reads nothing and changes nothing itself; each call its program makes is checked as its own, so plan
        # mode may offer it (and its programs call read-only tools only).
        hints=ToolHints(title="Run code", read_only_hint=True, destructive_hint=False, open_world_hint=False),
        run=functools.partial(_run, time_limit=time_limit),
    )


def line_of(spec: ToolSpec) -> str:
    """`f.append(path: str, text: str) -> str: Append text to a file.`; a tool that declares its structured output
    returns a dict, whose keys the line names: `-> {timezone: str, datetime: str}`."""
    returns = "str"
    if spec.output_schema is not None:
        keys = _parameters(spec.output_schema).replace("?: ", ": ")  # what a result holds, given or not
        returns = f"{{{keys}}}" if keys else "dict"
    description = one_line(spec.description, _DESCRIPTION_CHARS, at_a_word=True) or "(no description)"
    return f"- {spec.name}({_parameters(spec.input_schema)}) -> {returns}: {description}"


def _parameters(schema: Mapping[str, Any]) -> str:
    """The schema's top-level properties with Python's type names: `path: str, limit?: int` (`?`: optional)."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return ""
    required = schema.get("required")
    needed = set(required) if isinstance(required, list) else set()
    return ", ".join(f"{name}{'' if name in needed else '?'}: {_python_type(p)}" for name, p in properties.items())


def _python_type(prop: Any, depth: int = 0) -> str:
    """A property's type as Python names it: `str`, `int|None`, `dict[]`, `'a'|'b'`; `any` where the schema says
    nothing a line can."""
    if not isinstance(prop, Mapping) or depth > 3:
        return "any"
    if "enum" in prop and isinstance(prop["enum"], list):
        return "|".join(repr(value) for value in prop["enum"][:6]) + ("|…" if len(prop["enum"]) > 6 else "")
    alternatives = prop.get("anyOf") or prop.get("oneOf")
    if isinstance(alternatives, list) and alternatives:
        return "|".join(_python_type(alternative, depth + 1) for alternative in alternatives)
    kind = prop.get("type")
    if isinstance(kind, list):
        return "|".join(_PYTHON_TYPES.get(str(k), str(k)) for k in kind)
    if kind == "array":
        return f"{_python_type(prop.get('items'), depth + 1)}[]" if "items" in prop else "list"
    if kind == "object" or "$ref" in prop:
        return "dict"
    return _PYTHON_TYPES.get(str(kind), "any") if kind else "any"


async def _run(arguments: Mapping[str, Any], context: RunContext = NO_RUN, /, *, time_limit: float) -> ToolOutcome:
    code = arguments.get("code")
    if not isinstance(code, str) or not code.strip():
        return tool_call.error("run_code: code must be a Python program, as a string")
    if len(code) > MAX_CODE_CHARS:
        return tool_call.error(f"run_code: code is {len(code):,} characters; at most {MAX_CODE_CHARS:,}")
    if context.call_tool is None:
        return tool_call.error("run_code: no run calls this program's tools; run it within agent or plan")
    end = await sandbox.run_program(code, _ProgramCalls(context.call_tool), time_limit=time_limit)
    if end.error is not None:
        printed = end.printed[-_PRINTED_WITH_ERROR:]
        return tool_call.error(f"{end.error}\nprinted before it:\n{printed}" if printed else end.error)
    text = end.printed
    if end.value is not None:
        # a value may be as large as a program's memory: said off the event loop, and held to the output's limit
        said = await anyio.to_thread.run_sync(sandbox.value_text, end.value)
        if len(text) + len(said) > sandbox.OUTPUT_LIMIT:
            return tool_call.error(
                f"run_code: the program's output and last value are more than {sandbox.OUTPUT_LIMIT:,} characters"
                " (the limit); print or return less"
            )
        text = f"{text}{'' if not text or text.endswith(chr(10)) else chr(10)}{said}"
    return ToolOutcome(parts=(TextPart(text=text or "(the program printed nothing, and its last value was None)"),))


@dataclasses.dataclass(frozen=True)
class _ProgramCalls:
    """The program's `call_tool`, answered by the run's call of the tool."""

    call: InnerCall

    async def __call__(self, name: Any, arguments: Any) -> Any:
        outcome = await self.call(name, arguments)
        text = tool_call.kept_text(outcome)
        if outcome.is_error and outcome.error_kind == "limit":
            raise sandbox.ProgramStopped(f"run_code: the program was stopped: {one_line(text, 500)}")
        if outcome.is_error:
            raise sandbox.CallRefused(one_line(text, 2_000) or "the tool failed")
        if outcome.structured is not None:
            return dict(outcome.structured)
        return text
