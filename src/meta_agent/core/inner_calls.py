"""The calls a program of code mode makes (internal/run_code.py): each one named as the model would have called it,
so the tool step checks, approves, runs and reports it as a direct call (core/tool_step.py); and their records, which
follow the record of the call that ran the program.

A program names a tool by its full name (`server.tool`), as the toolbox does. A name the run did not select, run_code
itself, and arguments that are no JSON object are refused here, before anything is run or reported.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from meta_agent.core import tool_call
from meta_agent.core.messages import TOO_DEEP, TOO_LARGE, TextPart, ToolCall, too_deep, too_large
from meta_agent.core.result import Mode, ToolCallRecord
from meta_agent.core.tools import RUN_CODE, ToolOutcome, ToolSpec
from meta_agent.shared.text import one_line

_LISTED = 40  # of the run's tools, the names an unknown name's error lists at most
_NAME_CHARS = 100  # of an unknown name, what its error quotes
NOT_JSON = "no JSON object (a dict of strings, numbers, booleans, None, lists and dicts)"


class InnerCalls:
    """The calls the programs of one run make, by the model's call that ran each program."""

    def __init__(self, tools: Sequence[ToolSpec], mode: Mode) -> None:
        self.by_name = {spec.name: spec for spec in tools}
        self.mode = mode
        self._records: dict[str, list[ToolCallRecord]] = {}  # by the program's call id

    def call_of(self, program: ToolCall, name: Any, arguments: Any) -> tuple[ToolCall, ToolOutcome | None]:
        """The call `program` makes of `name` with `arguments`, as the model would have made it (its id the
        program's, numbered on: the same on a durable run's replay); or why it is refused."""
        made = self._records.setdefault(program.id, [])
        call = ToolCall(id=f"{program.id}.{len(made) + 1}", name="", arguments={})
        spec = self.by_name.get(name) if isinstance(name, str) else None
        if spec is None or (spec.internal and spec.name == RUN_CODE):
            return call, tool_call.error(self._unknown(name))
        problem = _argument_problem(arguments)
        if problem is not None:
            return call, tool_call.error(f"call_tool({spec.name!r}, ...): the arguments are {problem}")
        return ToolCall(id=call.id, name=spec.alias, arguments=dict(arguments)), None

    def record(
        self, program: ToolCall, call: ToolCall, name: str, full: ToolOutcome, duration_ms: int
    ) -> ToolCallRecord:
        """The record of a call `program` made, kept for the step's record."""
        error = full.parts[0].text if full.is_error and full.parts and isinstance(full.parts[0], TextPart) else None
        record = ToolCallRecord(
            name=name,
            arguments=call.arguments,
            ok=not full.is_error,
            duration_ms=duration_ms,
            error=one_line(error, 2_000) if error else None,
            error_kind=(full.error_kind or "tool") if full.is_error else None,
            via=RUN_CODE,
        )
        self._records.setdefault(program.id, []).append(record)
        return record

    def after(self, call: ToolCall, own: ToolCallRecord) -> Iterator[ToolCallRecord]:
        """The call's own record, then those of the calls its program made."""
        yield own
        yield from self._records.pop(call.id, ())

    def _unknown(self, name: Any) -> str:
        if not isinstance(name, str):
            return f"call_tool: the tool's name must be a string, not {type(name).__name__}"
        names = sorted(n for n in self.by_name if n != RUN_CODE)
        listed = ", ".join(names[:_LISTED]) + (f" and {len(names) - _LISTED} more" if len(names) > _LISTED else "")
        plan = "; plan mode offers read-only tools only" if self.mode == "plan" else ""
        quoted = one_line(name, _NAME_CHARS)
        return f"call_tool: {quoted!r} is not a tool of this run{plan}; its tools are: {listed or 'none'}"


def _argument_problem(arguments: Any) -> str | None:
    """What makes `arguments` no valid arguments of a call, or None."""
    if not isinstance(arguments, Mapping):
        return f"a {type(arguments).__name__}, {NOT_JSON}"
    if too_deep(arguments):
        return TOO_DEEP
    if too_large(arguments):
        return TOO_LARGE
    try:  # strings for keys, JSON's values only: what a child gets on the wire
        json.dumps(arguments, allow_nan=False, default=_refuse)
    except (TypeError, ValueError) as exc:
        return f"{NOT_JSON}: {one_line(str(exc), 200)}"
    if any(not isinstance(key, str) for key in arguments):
        return f"{NOT_JSON}: a key is not a string"
    return None


def _refuse(value: Any) -> Any:
    raise TypeError(f"a {type(value).__name__} is not JSON")
