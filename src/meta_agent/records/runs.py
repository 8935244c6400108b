"""Reading run traces back: the list of recent runs and a readable account of one (`meta-agent runs [show ID]`).

A trace is read for what is whole in it: a line that is not a JSON object, or a record without the fields its kind
needs, is skipped and counted, and so is a file of the trace directory that is not a readable trace. A run whose
trace has no last record is `running` while a live process still writes it (see `tracing.trace_is_live`), else
`interrupted`.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from meta_agent.errors import ConfigError
from meta_agent.records.tracing import read_trace
from meta_agent.text import one_line, plural

SHOWN = 300  # characters of a tool result or an answer shown in an account
RUN_ID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")  # a ULID
Status = Literal["running", "interrupted", "done"]


# -- the records an account tells; other kinds are kept only as whole records --------------------------------------


class _Record(BaseModel):
    kind: str
    ts: str
    step: int | None = None


class _Started(_Record):
    run_id: str
    mode: str
    model: str
    task: str


class _Thought(BaseModel):
    text: str = ""


class _Asked(BaseModel):
    arguments: Any = None


class _Response(BaseModel):
    thinking: list[_Thought] = []
    tool_calls: list[_Asked] = []


class _Responded(_Record):
    duration_ms: int
    input_tokens: int
    output_tokens: int
    text: str = ""
    tool_calls: list[str] = []
    response: _Response | None = None


class _Answered(_Record):
    name: str
    answer: str


class _Part(BaseModel):
    kind: str = "?"
    text: str | None = None


class _ToolFinished(_Record):
    name: str
    ok: bool
    duration_ms: int
    result: list[_Part] = []


class _Limit(_Record):
    limit: str


class _Usage(BaseModel):
    model_calls: int
    tool_calls: int
    input_tokens: int
    output_tokens: int


class _Result(BaseModel):
    answer: str
    stop_reason: str
    steps: list[Any] = []
    usage: _Usage


class _Finished(_Record):
    result: _Result


class _Failed(_Record):
    error: str
    result: _Result | None = None  # what the run had done; traces of older versions lack it


_KINDS: dict[str, type[_Record]] = {
    "run_started": _Started,
    "model_responded": _Responded,
    "approval_answered": _Answered,
    "tool_call_finished": _ToolFinished,
    "limit_reached": _Limit,
    "run_finished": _Finished,
    "run_failed": _Failed,
}


@dataclass(frozen=True, kw_only=True)
class Trace:
    """What could be read of one run's trace."""

    records: tuple[_Record, ...]
    skipped: int  # lines that were not a readable record
    live: bool  # a live process was still writing it when it was read

    @property
    def started(self) -> _Started | None:
        return next((r for r in self.records if isinstance(r, _Started)), None)

    @property
    def end(self) -> _Finished | _Failed | None:
        return next((r for r in reversed(self.records) if isinstance(r, _Finished | _Failed)), None)

    @property
    def status(self) -> Status:
        if self.end is not None:
            return "done"
        return "running" if self.live else "interrupted"


def read(directory: Path, run_id: str) -> Trace:
    """The trace of one run.

    Raises:
        ConfigError: no trace of that run in `directory`, or it cannot be read, or nothing in it is readable.
    """
    path = directory / f"{run_id}.jsonl"
    if not RUN_ID.fullmatch(run_id) or not path.is_file():
        raise ConfigError(f"runs: no trace of run {run_id!r} in {directory} (see `meta-agent runs`)")
    try:
        trace = _read(path)
    except OSError as exc:
        raise ConfigError(f"runs: cannot read {path}: {exc.strerror or exc}") from None
    if not trace.records:
        why = plural(trace.skipped, "unreadable line") if trace.skipped else "it is empty"
        raise ConfigError(f"runs: {path} holds no readable record ({why})")
    return trace


def _read(path: Path) -> Trace:
    data, live = read_trace(path)
    if live:  # the writer may be halfway through its last line: that line is not cut, only not written yet
        data = data[: data.rfind(b"\n") + 1]
    records, skipped = [], 0
    for line in data.split(b"\n"):  # only "\n" ends a record; str.splitlines would also cut at U+2028 in a text
        if not line.strip():
            continue
        record = _record(line)
        if record is None:
            skipped += 1
        else:
            records.append(record)
    return Trace(records=tuple(records), skipped=skipped, live=live)


def _record(line: bytes) -> _Record | None:
    """One line as a record, or None: not JSON (cut short by a crash), not an object, or missing what its kind needs."""
    try:
        raw = json.loads(line.decode("utf-8", errors="replace"))
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        return None
    if not isinstance(raw, dict):
        return None
    kind = raw.get("kind")
    try:
        return _KINDS.get(kind if isinstance(kind, str) else "", _Record).model_validate(raw)
    except (ValidationError, RecursionError):
        return None


# -- the list of recent runs -----------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    run_id: str
    started: str
    mode: str
    task: str
    status: Status
    stop_reason: str  # the result's, "error" for a failed run, else the status (running, interrupted)
    steps: int
    tokens: int
    seconds: float | None


@dataclass(frozen=True, kw_only=True)
class Listing:
    runs: list[RunSummary]
    skipped_files: list[str] = field(default_factory=list)  # names of *.jsonl files that are no readable trace
    skipped_records: int = 0  # unreadable lines in the traces listed


def recent(directory: Path, limit: int = 20) -> Listing:
    """The newest `limit` runs first, and what could not be read on the way.

    Raises:
        ConfigError: `directory` is a file, or cannot be listed.
    """
    runs: list[RunSummary] = []
    skipped_files: list[str] = []
    skipped_records = 0
    for path in _newest_first(directory):
        if len(runs) == limit:
            break
        try:
            trace = _read(path) if RUN_ID.fullmatch(path.stem) else None
        except OSError:  # a directory named *.jsonl, a file we may not read
            trace = None
        summary = _summary(path.stem, trace) if trace is not None else None
        if summary is None:
            skipped_files.append(path.name)
        else:
            runs.append(summary)
            skipped_records += trace.skipped if trace is not None else 0
    return Listing(runs=runs, skipped_files=skipped_files, skipped_records=skipped_records)


def _newest_first(directory: Path) -> list[Path]:
    """Raises:
    ConfigError: the directory is a file, or cannot be listed.
    """
    if not directory.exists():
        return []  # no run has written a trace yet
    if not directory.is_dir():
        raise ConfigError(f"runs: {directory} is not a directory")
    try:
        paths = [path for path in directory.iterdir() if path.suffix == ".jsonl"]
    except OSError as exc:
        raise ConfigError(f"runs: cannot read {directory}: {exc.strerror or exc}") from None
    stamped = []
    for path in paths:
        try:
            stamped.append((path.stat().st_mtime, path))
        except OSError:
            continue  # pruned while we looked
    return [path for _, path in sorted(stamped, reverse=True)]


def _summary(run_id: str, trace: Trace) -> RunSummary | None:
    first, end = trace.started, trace.end
    if first is None:
        return None
    result = end.result if end is not None else None
    status = trace.status
    return RunSummary(
        run_id=run_id,
        started=first.ts,
        mode=first.mode,
        task=first.task,
        status=status,
        stop_reason=result.stop_reason if result else ("error" if end is not None else status),
        steps=len(result.steps) if result else 0,
        tokens=result.usage.input_tokens + result.usage.output_tokens if result else 0,
        seconds=_seconds(first.ts, trace.records[-1].ts),
    )


def _seconds(start: str, end: str) -> float | None:
    try:
        return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    except (ValueError, TypeError):  # TypeError: one time with a zone and one without
        return None


# -- one run told ----------------------------------------------------------------------------------------------------


def account(trace: Trace) -> list[str]:
    """A run step by step as a person reads it: what the model asked, what each tool returned, where time went."""
    lines: list[str] = []
    model_ms: list[int] = []
    tool_ms: dict[str, list[int]] = defaultdict(list)
    for record in trace.records:
        if isinstance(record, _Responded):
            model_ms.append(record.duration_ms)
        elif isinstance(record, _ToolFinished):
            tool_ms[record.name].append(record.duration_ms)
        lines += _told(record)
    if trace.end is None:
        lines.append(
            "running · a live process is still writing this trace"
            if trace.live
            else "interrupted · the process running it ended before the run did"
        )
    spent = [f"model {sum(model_ms)} ms ({plural(len(model_ms), 'call')})"]
    by_time = sorted(tool_ms.items(), key=lambda item: -sum(item[1]))
    spent += [f"{name} {sum(ms)} ms ({plural(len(ms), 'call')})" for name, ms in by_time]
    lines.append("where time went: " + ", ".join(spent))
    return lines


def _told(record: _Record) -> list[str]:
    step = record.step
    match record:
        case _Started():
            return [f"run {record.run_id} · {record.mode} with {record.model} · {record.ts}", f"task: {record.task}"]
        case _Responded():
            return _told_response(record)
        case _Answered():
            return [f"step {step} · {record.name}: {record.answer}"]
        case _ToolFinished():
            text = " ".join(part.text if part.text is not None else f"[{part.kind}]" for part in record.result)
            state = "ok" if record.ok else "error"
            return [f"step {step} · {record.name} {state} ({record.duration_ms} ms)", f"  returned: {_short(text)}"]
        case _Limit():
            return [f"step {step} · limit {record.limit}: last turn without tools"]
        case _Finished():
            result = record.result
            return [f"done · {result.stop_reason} · {_spent(result.usage)}", f"answer: {_short(result.answer)}"]
        case _Failed():
            spent = f" · {_spent(record.result.usage)}" if record.result else ""  # older traces lack the result
            return [f"failed{spent} · {record.error}"]
    return []


def _spent(usage: _Usage) -> str:
    calls = f"{plural(usage.model_calls, 'model call')}, {plural(usage.tool_calls, 'tool call')}"
    return f"{calls}, {usage.input_tokens + usage.output_tokens} tokens"


def _told_response(record: _Responded) -> list[str]:
    tokens = f"{record.input_tokens} in / {record.output_tokens} out tokens"
    lines = [f"step {record.step} · model ({record.duration_ms} ms, {tokens})"]
    response = record.response or _Response()
    lines += [f"  thought: {_short(thought.text)}" for thought in response.thinking if thought.text]
    for call, name in zip(response.tool_calls, record.tool_calls, strict=False):
        lines.append(f"  asked for: {name} {_short(_json(call.arguments))}")
    if record.text:
        lines.append(f"  said: {_short(record.text)}")
    return lines


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (ValueError, RecursionError):  # nested about as deep as the parser allows, which the encoder may not
        return "[nested too deeply to show]"


def _short(text: str) -> str:
    return one_line(str(text), SHOWN)
