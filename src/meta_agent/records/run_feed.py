"""A run's events as its views show them (the run view of the apps, the console's run page): each event made into a
small JSON body, its text bounded and made safe to show, kept in the database (store/run_events.py) as the run goes,
so that a view on any replica reads the run live, after a cursor.

What a model, a child or a user wrote reaches a view as text only: the view puts it in the page as text, never as
markup, and this module has already written its control characters (a terminal's escapes, bidirectional overrides,
lone surrogates) as visible symbols, so that no text can hide or reorder what a view shows around it.

Each body also keeps the event's progress line (`line`, as MCP progress says it), so that a task running on one replica
reads on every other with that line as its status message.

Bounds, since every part of an event comes from outside: each text is cut (`TEXT_CHARS`, an answer `ANSWER_CHARS`,
arguments `ARGUMENT_CHARS` as JSON), a result's text is read only as far as its cut (a 10 MB result costs its first
16 K characters), and a run keeps at most `MAX_EVENTS` events and `MAX_CHARS` characters of them; past either, only its
end is kept, after a `dropped` event saying how many were not. Writes are batched (`FLUSH_SECONDS`) and never fail the
run: a database that cannot be written is logged once, and what it could not keep is tried again with the next batch.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol

import anyio
import structlog

from meta_agent.core import events as ev
from meta_agent.core.event_lines import describe
from meta_agent.core.messages import Part, TextPart
from meta_agent.shared.text import one_line

log = structlog.get_logger(__name__)
TEXT_CHARS = 16_000  # a reply, a reasoning, a tool result's text, an error
ANSWER_CHARS = 64_000  # the final answer
ARGUMENT_CHARS = 8_000  # a tool call's arguments, as JSON
TASK_CHARS = 4_000
TOOL_NAMES = 200  # of a run's tools, listed in its first event
LINE_CHARS = 500  # an event's progress line, kept with it: the status message of a task read on another replica
MAX_EVENTS = 2_000
MAX_CHARS = 4_000_000
FLUSH_SECONDS = 0.25  # how long an event may wait to be written with the next ones
# C0 and C1 controls but the line break and the tab, DEL, the bidirectional marks, embeddings, overrides and isolates,
# and lone surrogates (which no UTF-8 database takes).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _symbol(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if code < 0x20:
        return chr(0x2400 + code)  # ␛ for ESC, ␍ for CR: the Control Pictures block
    if code == 0x7F:
        return "\u2421"
    if 0xD800 <= code <= 0xDFFF:
        return "\ufffd"
    return f"<U+{code:04X}>"


def shown(text: str, limit: int = TEXT_CHARS) -> tuple[str, bool]:
    """`text` as a view shows it: its first `limit` characters with the unsafe ones made visible, and whether it was
    cut."""
    cut = len(text) > limit
    return safe(text[:limit] if cut else text), cut


def safe(text: str) -> str:
    """`text` with its unsafe characters made visible: what a host shows of a model's or a child's text (a progress
    line, an approval's question). A lone surrogate (JSON's "\\ud800", which no UTF-8 encodes) would leave the
    answer that carries it unwritten; a terminal's escapes and bidirectional overrides would act, and an override
    can show a tool call's arguments as other than they are."""
    return _UNSAFE.sub(_symbol, text)


def progress_line(event: ev.Event) -> str | None:
    """The event's line (core/event_lines.py), whole, made `safe`: what MCP progress says of it, and a task's status
    message on the replica running it (on the others, its line kept here)."""
    line = describe(event)
    return None if line is None else safe(line)


def _text(text: str, limit: int = TEXT_CHARS) -> str:
    safe, cut = shown(text, limit)
    return f"{safe}… [{len(text) - limit} more characters not shown]" if cut else safe


def _safe_value(value: Any) -> Any:
    """A JSON value whose strings (keys too) are shown safely; bounded by the caller, which measured it first."""
    if isinstance(value, str):
        return shown(value)[0]
    if isinstance(value, Mapping):
        return {shown(str(key))[0]: _safe_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_safe_value(item) for item in value]
    return value


def shown_arguments(arguments: Mapping[str, Any]) -> tuple[Any, bool]:
    """A call's arguments as a view shows them: the value, or past `ARGUMENT_CHARS` of JSON its first characters as a
    string; and whether they were cut."""
    try:
        whole = json.dumps(arguments, ensure_ascii=False, default=str)
    except (ValueError, RecursionError):
        return "(arguments that are not JSON)", True
    if len(whole) > ARGUMENT_CHARS:
        return _text(whole, ARGUMENT_CHARS), True
    return _safe_value(json.loads(whole)), False


def _result_text(parts: Iterable[Part]) -> tuple[str, int, bool]:
    """The text of a tool's result, read only as far as its cut; its images counted; whether it was cut."""
    texts: list[str] = []
    length, images, cut = 0, 0, False
    for part in parts:
        if not isinstance(part, TextPart):
            images += 1
            continue
        if length >= TEXT_CHARS:
            cut = True
            continue
        texts.append(part.text[: TEXT_CHARS - length + 1])
        length += len(texts[-1])
    joined = "\n".join(texts)
    cut = cut or len(joined) > TEXT_CHARS
    return _text(joined), images, cut


def view_of(event: ev.Event) -> dict[str, Any] | None:
    """The body a view shows for `event`, without its number; None: a view shows nothing of it (heartbeats, the
    transcript sent to the model, a child's progress)."""
    match event:
        case ev.RunStarted():
            return {
                "kind": "run_started",
                "step": 0,
                "mode": event.mode,
                "task": _text(event.task, TASK_CHARS),
                "model": _text(event.model, 200),
                "tools": [_text(name, 200) for name in event.tools[:TOOL_NAMES]],
                "tool_count": len(event.tools),
                "unavailable": [
                    {"server": _text(item.server, 200), "reason": _text(item.reason, 1000)}
                    for item in event.unavailable_servers
                ],
                "limits": None
                if event.limits is None
                else {
                    "max_steps": event.limits.max_steps,
                    "token_budget": event.limits.token_budget,
                    "time_limit": event.limits.time_limit,
                },
            }
        case ev.ModelTurnStarted():
            return {"kind": "model_turn", "step": event.step, "final": event.final}
        case ev.Thinking():
            return {"kind": "thinking", "step": event.step, "text": _text(event.text)}
        case ev.ModelResponded():
            return {
                "kind": "model_reply",
                "step": event.step,
                "text": _text(event.text),
                "tool_calls": [_text(name, 200) for name in event.tool_calls[:TOOL_NAMES]],
                "input_tokens": event.input_tokens,
                "output_tokens": event.output_tokens,
                "duration_ms": event.duration_ms,
            }
        case ev.ToolCallStarted() | ev.ToolCallFinished() | ev.ApprovalRequested() | ev.ApprovalAnswered():
            return _call_view(event)
        case ev.ModelSwitched():
            return {
                "kind": "model_switched",
                "step": event.step,
                "failed": _text(event.failed, 200),
                "next": _text(event.next, 200),
                "brief": _text(event.brief, 1000),
            }
        case ev.LimitReached():
            return {"kind": "limit", "step": event.step, "limit": event.limit}
        case ev.RunFinished():
            return _finished(event)
        case ev.RunFailed():
            return {"kind": "run_failed", "step": 0, "error": _text(one_line(event.error), TEXT_CHARS)}
        case _:
            return None


def _call_view(
    event: ev.ToolCallStarted | ev.ToolCallFinished | ev.ApprovalRequested | ev.ApprovalAnswered,
) -> dict[str, Any]:
    """The body of an event of one tool call: its start, its end, its approval asked and answered."""
    match event:
        case ev.ToolCallStarted():
            arguments, cut = shown_arguments(event.arguments)
            return {
                "kind": "tool_call",
                "step": event.step,
                "call_id": _text(event.call_id, 200),
                "name": _text(event.name, 200),
                "arguments": arguments,
                "cut": cut,
            }
        case ev.ToolCallFinished():
            text, images, cut = _result_text(event.full_result or event.result)
            return {
                "kind": "tool_result",
                "step": event.step,
                "call_id": _text(event.call_id, 200),
                "name": _text(event.name, 200),
                "ok": event.ok,
                "duration_ms": event.duration_ms,
                "error": None if event.error is None else _text(event.error),
                "text": text,
                "images": images,
                "cut": cut,
            }
        case ev.ApprovalRequested():
            arguments, cut = shown_arguments(event.arguments)
            return {
                "kind": "approval_requested",
                "step": event.step,
                "call_id": _text(event.call_id, 200),
                "name": _text(event.name, 200),
                "arguments": arguments,
                "cut": cut,
            }
        case ev.ApprovalAnswered():
            return {
                "kind": "approval_answered",
                "step": event.step,
                "call_id": _text(event.call_id, 200),
                "name": _text(event.name, 200),
                "allowed": event.allowed,
                "answer": _text(event.answer, 1000),
            }


def _finished(event: ev.RunFinished) -> dict[str, Any]:
    result = event.result
    usage = result.usage
    return {
        "kind": "run_finished",
        "step": len(result.steps),
        "stop_reason": result.stop_reason,
        "answer": _text(result.answer, ANSWER_CHARS),
        "usage": {
            "model_calls": usage.model_calls,
            "tool_calls": usage.tool_calls,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
        },
    }


class EventRows(Protocol):
    """Where a run's events are kept (store/run_events.py `RunEvents`); `errors`: what it raises when it cannot."""

    errors: tuple[type[Exception], ...]

    async def append(self, run_id: str, bodies: Sequence[tuple[int, str]]) -> None: ...

    async def last(self, run_id: str) -> int: ...


class RunFeed:
    """The sink that keeps one run's events for its views, numbered after those kept already (a durable run resumed
    here goes on after what its first replica kept, behind a `resumed` event)."""

    def __init__(
        self, store: EventRows, run_id: str, redact: Callable[[str], str] | None = None, *, resumed: bool = False
    ) -> None:
        """`redact`: the traces' redaction (records/traces.py `Redactor`), run over each body's JSON as a trace's.
        `resumed`: a durable run resumed here, whose first execution may have kept events already (a run that starts
        now has none to look for)."""
        self.store = store
        self.run_id = run_id
        self._redact = redact
        self._resumed = resumed
        self._next = 1
        self._kept = 0  # events taken, and their characters, against the run's bounds
        self._chars = 0
        self._dropped = 0
        self._pending: list[tuple[int, str]] = []
        self._failing = False

    async def __call__(self, event: ev.Event) -> None:
        body = view_of(event)
        if body is None:
            return
        if (line := describe(event)) is not None:
            body["line"] = shown(one_line(line, LINE_CHARS), LINE_CHARS)[0]
        text = json.dumps(body, ensure_ascii=False)
        if self._redact is not None:  # kept in the database as long as the run: no secret a trace would not keep
            text = self._redact(text)
        last = isinstance(event, ev.RunFinished | ev.RunFailed)
        if not last and (self._kept >= MAX_EVENTS or self._chars + len(text) > MAX_CHARS):
            self._dropped += 1
            return
        if last and self._dropped:
            self._take(json.dumps({"kind": "dropped", "step": 0, "count": self._dropped}))
        self._take(text)

    def _take(self, text: str) -> None:
        self._pending.append((self._next, text))
        self._next += 1
        self._kept += 1
        self._chars += len(text)

    @asynccontextmanager
    async def writing(self) -> AsyncIterator[None]:
        """Write the events taken while entered, a batch every FLUSH_SECONDS, the last ones as it is left."""
        await self._start()
        failure: Exception | None = None
        async with anyio.create_task_group() as writer:
            writer.start_soon(self._flushing)
            try:
                yield
            except Exception as exc:  # raised below as it came, not wrapped in this task group's exception group
                failure = exc
            finally:
                writer.cancel_scope.cancel()
                with anyio.CancelScope(shield=True):
                    await self.flush()
        if failure is not None:
            raise failure

    async def _start(self) -> None:
        if not self._resumed:
            return
        try:
            kept = await self.store.last(self.run_id)
        except self.store.errors as exc:
            self._failed(exc)
            return
        if kept:  # resumed here: numbered on, and the view told that the steps done before are told again
            self._next = kept + 1
            self._take(json.dumps({"kind": "resumed", "step": 0}))

    async def _flushing(self) -> None:
        while True:
            # on the clock's ticks, which every run's feed shares: runs' batches meet in one transaction
            await anyio.sleep(FLUSH_SECONDS - anyio.current_time() % FLUSH_SECONDS)
            await self.flush()

    async def flush(self) -> None:
        """Write the events taken since the last batch; what the database does not take waits for the next one."""
        batch, self._pending = self._pending, []
        try:
            await self.store.append(self.run_id, batch)
        except self.store.errors as exc:
            self._pending = batch + self._pending  # bounded: the run keeps at most MAX_EVENTS
            self._failed(exc)
            return
        if self._failing:
            log.info("run_events_written", run_id=self.run_id)
        self._failing = False

    def _failed(self, exc: Exception) -> None:
        if not self._failing:
            log.warning("run_events_not_written", run_id=self.run_id, error=one_line(str(exc), 500))
        self._failing = True
