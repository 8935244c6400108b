"""The `read_result` internal tool: a slice, or the matching lines, of a tool result the run kept whole because it
was too long to give the model (README, Long tool results: handles and `read_result`; META_AGENT_RESULT_INLINE_CHARS).

The run keeps such a result under a handle, `result-3@7K2QZD` (its number in the run, then the end of the run's id),
and gives the model its head and that handle (core/tool_call.py). Handles last as long as their run: one of another
run (an earlier turn of the conversation) is refused in one line, as is anything else the tool cannot do. Every answer
says where it is (offset, length, total) so the model can go on from it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import partial
from typing import Any

import anyio

from meta_agent.core import patterns, tool_call
from meta_agent.core.messages import TextPart
from meta_agent.core.tools import NO_RUN, InternalTool, RunContext, ToolHints, ToolOutcome
from meta_agent.shared.text import one_line, plural, some_of

DEFAULT_LENGTH = 8_000  # characters of a slice unless the model asks for another length (about 2,000 tokens)
MAX_LENGTH = 20_000  # the most one answer gives: never more than the default inline limit
MAX_MATCHES = 30  # matching lines in one answer
_EXCERPT_BEFORE, _EXCERPT_AFTER = 80, 220  # what a long matching line shows around its match
_HANDLE = re.compile(r"result-([0-9]+)@([0-9A-Za-z]+)")
_SHOWN = 10  # the run's handles listed when the model names one that is not there
_QUOTED = 200  # characters of a bad pattern its refusal quotes (a pattern may be thousands long)


class _Refused(Exception):
    """What read_result will not do as asked; `str(error)` is the line the model reads."""


async def _run(arguments: Mapping[str, Any], context: RunContext = NO_RUN) -> ToolOutcome:
    try:
        handle, text = _kept(arguments.get("handle"), context)
        offset = _number(arguments.get("offset"), "offset", 0)
        if offset > len(text):
            raise _Refused(f"offset {offset} is past the end of {handle} ({len(text):,} characters)")
        pattern = arguments.get("pattern")
        if pattern is None or pattern == "":
            length = min(_number(arguments.get("length"), "length", DEFAULT_LENGTH, least=1), MAX_LENGTH)
            return ToolOutcome(parts=(TextPart(text=_slice(handle, text, offset, length)),))
        if not isinstance(pattern, str):
            raise _Refused(f"pattern must be a string (a regex), not {pattern!r}")
        # In a worker thread that lets go of the interpreter's lock while it matches, for at most 1 s in all
        # (core/patterns.py): the model's pattern never holds the event loop, however it backtracks.
        found = await anyio.to_thread.run_sync(partial(_matches, handle, text, offset, pattern), abandon_on_cancel=True)
        return ToolOutcome(parts=(TextPart(text=found),))
    except _Refused as exc:
        return tool_call.error(f"read_result: {exc}")


READ_RESULT = InternalTool(
    name=tool_call.READ_RESULT,
    description=(
        "Read a tool result that was too long to show whole: give the handle its notice names (result-1@...)."
        f" Without pattern: the text from offset (default 0), length characters (default {DEFAULT_LENGTH:,}, at"
        f" most {MAX_LENGTH:,}). With pattern (a Python regex): the lines that match, from offset on, each with its"
        " offset. Every answer says where it is and how to go on."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "handle": {"type": "string", "description": "The result's handle, e.g. result-1@7K2QZD."},
            "offset": {"type": "integer", "minimum": 0, "description": "Where to start, in characters (default 0)."},
            "length": {"type": "integer", "minimum": 1, "description": f"Characters to read (at most {MAX_LENGTH:,})."},
            "pattern": {"type": "string", "description": "A regex: return the matching lines instead of a slice."},
        },
        "required": ["handle"],
    },
    # It reads what the run already holds: read-only (plan mode may use it), idempotent and closed-world.
    hints=ToolHints(
        title="Read a long result",
        read_only_hint=True,
        destructive_hint=False,
        idempotent_hint=True,
        open_world_hint=False,
    ),
    run=_run,
)


def _kept(value: Any, context: RunContext) -> tuple[str, str]:
    """The handle the model gave, and the whole text the run kept under it.

    Raises:
        _Refused: not a handle, a handle of another run, or one this run does not have.
    """
    handle = value.strip() if isinstance(value, str) else ""
    named = _HANDLE.fullmatch(handle)
    if named is None:
        raise _Refused(f"{value!r} is not a result handle; a long result's notice names one, such as result-1@7K2QZD")
    if named[2] != tool_call.run_tag(context.run_id):
        raise _Refused(
            f"{handle} is a result of another run (an earlier turn or another call); a result is kept only for its"
            " own run: call its tool again"
        )
    text = context.results.get(handle)
    if text is not None:
        return handle, text
    if not context.results:
        raise _Refused(f"there is no {handle}: no result of this run was long enough to be kept")
    raise _Refused(f"there is no {handle}; this run's kept results are {some_of(sorted(context.results), _SHOWN)}")


def _number(value: Any, name: str, default: int, *, least: int = 0) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise _Refused(f"{name} must be a whole number of at least {least}, not {value!r}")
    return value


def _slice(handle: str, text: str, offset: int, length: int) -> str:
    """`length` characters of `text` from `offset`, after a line that says where they are and how to go on."""
    end = min(offset + length, len(text))
    after = f"read on with offset={end}" if end < len(text) else "this is the end"
    return f"[{handle}: characters {offset}-{end} of {len(text):,}; {after}]\n{text[offset:end]}"


def _matches(handle: str, text: str, offset: int, pattern: str) -> str:
    """The lines of `text` from `offset` on that `pattern` matches, at most MAX_MATCHES, each with the offset of its
    match and, past a few hundred characters, only the part around it; then how many more there are.

    Raises:
        _Refused: `pattern` is not a valid regex, or matching it took longer than patterns.BUDGET_SECONDS in all.
    """
    budget = patterns.Budget()
    try:
        patterns.compiled(pattern, re.MULTILINE)  # ^ and $ at each line's ends
    except patterns.BadPattern as exc:
        raise _Refused(f"pattern {one_line(repr(pattern), _QUOTED)} {exc}") from None
    shown: list[str] = []
    more = resume = 0  # the lines found past the ones shown; where the line after the last one shown starts
    start = offset
    while True:
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        try:
            found = budget.search(pattern, text, start, end, re.MULTILINE)
        except patterns.PatternTooSlow as exc:
            raise _Refused(f"{exc}; use a simpler one") from None
        if found is not None and len(shown) < MAX_MATCHES:
            shown.append(f"offset {found.start()}: {_excerpt(text, start, end, found.start())}")
            resume = end + 1
        elif found is not None:
            more += 1
        if end >= len(text):
            break
        start = end + 1
    where = f"{handle} ({len(text):,} characters) from offset {offset}"
    if not shown:
        return f"[no matching line in {where} for {pattern!r}]"
    head = f"[{plural(len(shown) + more, 'matching line')} in {where} for {pattern!r}"
    if more:
        head += f"; the first {len(shown)} are below: for the rest, call again with offset={resume}"
    return "\n".join((f"{head}]", *shown))


def _excerpt(text: str, start: int, end: int, at: int) -> str:
    """The line `text[start:end]`, or, past a few hundred characters, the part of it around `at`."""
    if end - start <= _EXCERPT_BEFORE + _EXCERPT_AFTER:
        return text[start:end]
    left, right = max(start, at - _EXCERPT_BEFORE), min(end, at + _EXCERPT_AFTER)
    return f"{'…' if left > start else ''}{text[left:right]}{'…' if right < end else ''}"
