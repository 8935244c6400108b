"""One line of text per event: the progress message hosts show and the live view of `meta-agent run`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from meta_agent.core import events as ev
from meta_agent.core.result import UnavailableServer, unavailable_line
from meta_agent.shared.text import one_line, plural

ARGUMENTS_SHOWN = 160
TEXT_SHOWN = 160  # characters of a model's thinking, a child's progress message, a failed model's brief
ERROR_SHOWN = 300  # characters of a tool's error, whose end often says the fix (`--allow f.write_file`)
UNAVAILABLE_SHOWN = 600  # characters of the servers not ready and why, on a run's first line
_DEEPEST = 8  # nesting shown in an arguments line: deeper values are "…"
_SHORTEST_ITEM = 4  # what one more item of a list or map adds to an arguments line, at least (`, 1`)


def describe(event: ev.Event) -> str | None:
    """The event as one line (README, MCP tools: progress), or None for events that say nothing new to a person."""
    match event:
        case ev.RunStarted(run_id=run_id, mode=mode, model=model, tools=tools, fallbacks=fallbacks):
            then = f" (then {', '.join(fallbacks)})" if fallbacks else ""
            line = f"start · run {run_id} · {mode} with {model}{then} · {plural(len(tools), 'tool')}"
            return line + _not_ready(event.unavailable_servers)
        case ev.ModelSwitched(step=step, failed=failed, brief=brief, next=following):
            return f"step {step} · {failed} failed ({_words(brief, TEXT_SHOWN)}); going on with {following}"
        case ev.ModelTurnStarted(step=step, final=final):
            return f"step {step} · model{' (last turn, no tools)' if final else ''}"
        case ev.Thinking(step=step, text=text):
            return f"step {step} · thinking: {_words(text, TEXT_SHOWN)}"
        case ev.ToolCallStarted(step=step, name=name, arguments=arguments):
            return f"step {step} · call {name} {arguments_line(arguments, ARGUMENTS_SHOWN)}"
        case ev.ToolCallFinished(step=step, name=name, ok=True, duration_ms=ms):
            return f"step {step} · {name} ok ({ms} ms)"
        case ev.ToolCallFinished(step=step, name=name, duration_ms=ms, error=error):
            return f"step {step} · {name} error ({ms} ms): {_words(error or '', ERROR_SHOWN)}"
        case ev.ChildProgress(step=step, name=name, progress=progress, total=total, message=message):
            told = message or (f"{progress:g}/{total:g}" if total else f"{progress:g}")
            return f"step {step} · {name}: {_words(told, TEXT_SHOWN)}"
        case ev.Heartbeat(step=0, waiting_for=what, elapsed_s=elapsed, run_id=run_id):  # before the run's first step
            return f"waiting · run {run_id} · for {what} ({elapsed:.0f} s)"
        case ev.Heartbeat(step=step, waiting_for=what, elapsed_s=elapsed):
            return f"step {step} · still waiting for {what} ({elapsed:.0f} s)"
        case ev.ApprovalRequested(step=step, name=name, arguments=arguments):
            return f"step {step} · asking the user to allow {name} {arguments_line(arguments, ARGUMENTS_SHOWN)}"
        case ev.ApprovalAnswered(step=step, name=name, allowed=allowed, answer=answer):
            return f"step {step} · {name} {'allowed' if allowed else 'not allowed'}: {answer}"
        case ev.LimitReached(step=step, limit=limit):
            return f"step {step} · limit {limit}: asking for a final answer"
        case ev.RunFinished(result=result):
            usage = result.usage
            return (
                f"done · {result.stop_reason} ({plural(usage.model_calls, 'model call')}, "
                f"{plural(usage.tool_calls, 'tool call')})"
            )
        case ev.RunFailed(error=error):
            return f"failed · {_words(error, ERROR_SHOWN)}"
        case ev.ModelResponded():
            return None
    return None


def _words(text: str, limit: int) -> str:
    """A text of the run's on one line, cut after a whole word: a person reads these."""
    return one_line(text, limit, at_a_word=True)


def _not_ready(servers: tuple[UnavailableServer, ...]) -> str:
    """What a run's first line adds for the servers it could have used that were not ready; nothing when all were."""
    if not servers:
        return ""
    return f" · not ready, their tools left out: {one_line(unavailable_line(servers), UNAVAILABLE_SHOWN)}"


def arguments_line(arguments: Mapping[str, Any], limit: int) -> str:
    """A tool call's arguments as one line of JSON, cut with an ellipsis past `limit` characters: what a progress
    message and an approval question show of them. Only their first `limit` characters or so are ever looked at, so
    a model's 100 MB argument costs no more than a short one."""
    return one_line(json.dumps(_head(dict(arguments), limit), ensure_ascii=False, default=str), limit)


def _head(value: Any, room: int, depth: int = 0) -> Any:
    """As much of `value` as a line of `room` characters can show: long strings, long lists and maps, and deep
    nesting cut (the line is cut at `room` anyway; this only spares the work of writing what it would cut)."""
    if isinstance(value, str):
        return value[: room + 1]
    if not isinstance(value, Mapping | list | tuple):
        return value
    if depth >= _DEEPEST or room <= 0:
        return "…"
    items = value.items() if isinstance(value, Mapping) else enumerate(value)
    kept: dict[str, Any] = {}
    for key, item in items:
        if room <= 0:
            kept["…"] = "…"
            break
        kept[str(key)[: room + 1]] = _head(item, room, depth + 1)
        room -= len(str(key)) + _SHORTEST_ITEM
    return kept if isinstance(value, Mapping) else list(kept.values())
