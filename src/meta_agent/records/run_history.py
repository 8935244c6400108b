"""A run's history read back from its trace: the records it holds, its status, and the list of recent runs.

What `meta-agent runs [show ID]` reads (cli/runs.py tells it). Each line of a trace is read back by the event type
that wrote it (core/events.py), which pydantic validates it against: a line that is not a JSON object, lacks its time
or kind, or that its type refuses (a field missing, a stop reason no run has), is skipped and counted, and so is a
file of the trace directory that is not a readable trace. A record of a kind this version does not know (a later
version's), and a model request, which the trace stores as what is new since the run's previous request rather than
as the event (records/traces.py), are kept for their time only. A run whose trace has no last record is `running`
while a live process still writes it (see `traces.trace_is_live`), else `interrupted`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import TypeAdapter, ValidationError

from meta_agent.core.events import Event, ModelRequested, RunFailed, RunFinished, RunStarted
from meta_agent.errors import ConfigError
from meta_agent.records.traces import read_trace
from meta_agent.shared.text import plural

RUN_ID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")  # a ULID
Status = Literal["running", "interrupted", "done"]

# Every event type by its kind; a model request is stored otherwise than as its event (see the docstring).
_TYPES: dict[str, type[Any]] = {kind.kind: kind for kind in get_args(Event) if kind is not ModelRequested}


@dataclass(frozen=True, kw_only=True)
class Untold:
    """A record kept for its time only: a model request, or a kind this version does not know."""

    kind: str


@dataclass(frozen=True, kw_only=True)
class Record:
    """One line of a trace: when it was written, and its event, as the event's own type reads it back."""

    ts: str
    event: Event | Untold


@dataclass(frozen=True, kw_only=True)
class Trace:
    """What could be read of one run's trace."""

    records: tuple[Record, ...]
    skipped: int  # lines that were not a readable record
    live: bool  # a live process was still writing it when it was read

    @property
    def start(self) -> tuple[str, RunStarted] | None:
        """When the run started, and how (its `run_started` record)."""
        for record in self.records:
            if isinstance(record.event, RunStarted):
                return record.ts, record.event
        return None

    @property
    def end(self) -> RunFinished | RunFailed | None:
        for record in reversed(self.records):
            if isinstance(record.event, RunFinished | RunFailed):
                return record.event
        return None

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


def _record(line: bytes) -> Record | None:
    """One line as a record, or None: not JSON (cut short by a crash), not an object, without its time or kind, or
    refused by its event's type. Fields the type does not have (`ts`, the first record's `writer`) are ignored."""
    try:
        raw = json.loads(line.decode("utf-8", errors="replace"))
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        return None
    if not isinstance(raw, dict):
        return None
    kind, ts = raw.get("kind"), raw.get("ts")
    if not isinstance(kind, str) or not isinstance(ts, str):
        return None
    if kind not in _TYPES:
        return Record(ts=ts, event=Untold(kind=kind))
    try:
        event: Event = _adapter(kind).validate_python(raw)
    except (ValidationError, RecursionError):
        return None
    return Record(ts=ts, event=event)


@cache
def _adapter(kind: str) -> TypeAdapter[Any]:
    """The validator of one kind's event type, made when a trace first holds that kind."""
    return TypeAdapter(_TYPES[kind])


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
    error: str | None = None  # why a run that ended without its result ended, in one line (not for one cancelled)


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
    start, end = trace.start, trace.end
    if start is None:
        return None
    started, first = start
    result = end.result if end is not None else None
    status = trace.status
    return RunSummary(
        run_id=run_id,
        started=started,
        mode=first.mode,
        task=first.task,
        status=status,
        stop_reason=result.stop_reason if result else ("error" if end is not None else status),
        steps=len(result.steps) if result else 0,
        tokens=result.usage.input_tokens + result.usage.output_tokens if result else 0,
        seconds=_seconds(started, trace.records[-1].ts),
        error=end.error if isinstance(end, RunFailed) else None,
    )


def _seconds(start: str, end: str) -> float | None:
    try:
        return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    except (ValueError, TypeError):  # TypeError: one time with a zone and one without
        return None
