"""Run traces: every event of a run, with the model requests and responses and the tool results in full (each value up
to 1 MB), as JSON lines in `<META_AGENT_TRACE_DIR>/<run_id>.jsonl`, with secrets redacted; read back, and pruned when
old.

A `model_requested` record holds what is new since the run's previous request: the messages from index
`messages_from` on, and the system prompt and tool schemas only when they changed. The records of a trace, read in
order, give every request in full, and a step costs the same whatever the length of the transcript. One thread per
process writes every trace, so a run's events cost it no disk I/O, and holds no trace open between two bursts of
records: a run that waits (parked for an answer, for up to 10 minutes) holds no file descriptor. Which traces a live
process still writes is told by one lock per process (records/trace_owners.py). A longer value is cut, with a marker
giving its length (records/trace_values.py).

Redaction is the traces' own: they hold requests and results in full, and nothing else is redacted.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import queue
import re
import stat
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import anyio
import structlog

from meta_agent.core.events import ModelRequested, ToolCallFinished
from meta_agent.core.messages import ModelRequest
from meta_agent.records import trace_owners, trace_values
from meta_agent.shared.secrets import is_secret_name

REDACTED = "[redacted]"
_BEARER = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{4,}")
_KEY_SHAPED = re.compile(r"\b(sk-[A-Za-z0-9_-]{8,})")
_MIN_SECRET = 4  # shorter values ("1", "on") are not worth hiding and would mangle the trace


def default_trace_dir() -> Path:
    """`traces` in the user state dir, as platformdirs finds it: on Linux $XDG_STATE_HOME/meta-agent/traces, else
    ~/.local/state/meta-agent/traces; on macOS under ~/Library/Application Support; on Windows under
    %LOCALAPPDATA%."""
    from platformdirs import user_state_path  # on first use: importing it costs every command's start a few ms

    return user_state_path("meta-agent", appauthor=False) / "traces"


class Redactor:
    """Replaces known secret values, bearer tokens and key-shaped strings in text."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self._secrets: list[str] = []
        self._add(secrets)

    def _add(self, secrets: Iterable[str]) -> None:
        found = {s for s in secrets if len(s) >= _MIN_SECRET}
        # a secret as it appears inside a JSON string, too: escaped to ASCII or not (the spans' contents keep letters)
        found |= {json.dumps(s, ensure_ascii=ascii)[1:-1] for s in found for ascii in (True, False)}
        self._secrets = sorted(found.union(self._secrets), key=len, reverse=True)

    @classmethod
    def of(cls, environ: Mapping[str, str], servers: Mapping[str, Any], http_token: str | None = None) -> Redactor:
        """Secrets of the environment (by the variable's name), every env and header value of servers.json, and the
        HTTP token a caller gives us."""
        secrets = [value for name, value in environ.items() if is_secret_name(name)]
        if http_token:
            secrets.append(http_token)
        redactor = cls(secrets)
        redactor.learn(servers)
        return redactor

    def learn(self, servers: Mapping[str, Any]) -> None:
        """Redact the env and header values of `servers` (a reloaded servers.json) too; what it redacted stays so."""
        self._add(value for entry in servers.values() for value in (*entry.env.values(), *entry.headers.values()))

    def learn_values(self, values: Iterable[str]) -> None:
        """Redact `values` too (a webhook's header values); what it redacted stays so."""
        self._add(values)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        # The patterns run only where their literal part occurs: scanning for it is many times faster.
        if "bearer" in text.lower():
            text = _BEARER.sub(lambda m: m.group(1) + REDACTED, text)
        return _KEY_SHAPED.sub(REDACTED, text) if "sk-" in text else text


END_KINDS = frozenset({"run_finished", "run_failed"})  # the last record of a run
# How long the end of a run waits for its trace to reach the disk: a hung disk (a stale NFS mount) costs the trace's
# tail, never the run's result.
FLUSH_TIMEOUT = 10.0
_CLOSE = object()  # handed to the writer thread after a run's last record
# A trace's records wait in memory for the end of a burst, or until they are this many bytes.
FLUSH_BYTES = 256 * 1024
# Items (batches of records) of a long burst after which the writer flushes: records reach the disk on a busy server.
FLUSH_EVERY = 64
# Opening a trace to append a burst to it, without translating newlines (Windows) or passing it to child processes.
_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)


class TraceWriter:
    """The trace sink of one run: `<dir>/<run_id>.jsonl`, one JSON object per event, secrets redacted.

    An event costs the run a list append: encoding, redaction and disk I/O happen on the process's one writer thread,
    in the order the events came. The events a run emits in one turn of the event loop go to that thread together,
    on the loop's next turn: each hand-off wakes the thread, which then takes the interpreter's lock from the event
    loop, so fewer hand-offs cost less, while the thread still writes a run's records as it goes (a run that waited
    to hand them all over at its end would wait for their writing). `aclose` waits (without blocking the event loop,
    nor a thread) until the trace is on disk. A trace that cannot be written is a warning, once; the run goes on."""

    def __init__(self, directory: Path, redact: Redactor) -> None:
        self._trace = _TraceFile(directory, redact)
        self._ended = False
        self._batch: list[tuple[float, Any]] = []
        self._handoff: asyncio.Handle | None = None

    @property
    def path(self) -> Path | None:
        return self._trace.path

    async def __call__(self, event: Any) -> None:
        if self._ended:
            return
        self._batch.append((time.time(), event))
        if event.kind in END_KINDS:
            self._end()
        elif self._handoff is None:
            self._handoff = asyncio.get_running_loop().call_soon(self._hand_off)

    def _hand_off(self) -> None:
        self._handoff = None
        if self._batch:
            batch, self._batch = self._batch, []
            _writer().put(self._trace, batch)

    async def aclose(self) -> None:
        """Return once every record of the run is on disk (or could not be written, or FLUSH_TIMEOUT passed). The
        writer thread wakes the event loop when it has closed the file: no thread waits for it."""
        self._end()
        loop = asyncio.get_running_loop()
        closed: asyncio.Future[None] = loop.create_future()

        def wake() -> None:  # on the writer thread
            with contextlib.suppress(RuntimeError):  # the event loop is closed: nobody waits any more
                loop.call_soon_threadsafe(_resolve, closed)

        self._trace.when_closed(wake)
        with anyio.move_on_after(FLUSH_TIMEOUT) as waited:
            await closed
        if waited.cancelled_caught:
            _warn("trace_not_flushed", self._trace, f"still writing after {FLUSH_TIMEOUT:g} s")

    def _end(self) -> None:
        if not self._ended:
            self._ended = True
            if self._handoff is not None:
                self._handoff.cancel()
            self._hand_off()
            _writer().put(self._trace, _CLOSE)


class _TraceFile:
    """One run's trace as the writer thread sees it; only that thread touches it. Its records wait in memory until
    the writer flushes them (`flush`: the file is opened, written and closed again)."""

    def __init__(self, directory: Path, redact: Redactor) -> None:
        self._directory = directory
        self._redact = redact
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._owned = False  # this trace keeps its directory's writer lock held
        self._broken = False
        self._last_request: ModelRequest | None = None
        self.path: Path | None = None
        self.run_id: str | None = None
        self._closed = False
        self._on_closed: Callable[[], None] | None = None
        self._lock = threading.Lock()  # between the writer thread, which closes, and the run, which waits for it

    def when_closed(self, callback: Callable[[], None]) -> None:
        """Call `callback` once the trace is closed (on the writer thread; at once, here, if it already is)."""
        with self._lock:
            if not self._closed:
                self._on_closed = callback
                return
        callback()

    def handle(self, item: Any) -> None:
        if item is _CLOSE:
            self.close()
            return
        for stamp, event in item:  # a batch of one run's records
            if self._broken:
                return
            try:
                self._write(stamp, event)
            except (OSError, ValueError, RecursionError) as exc:  # a full or read-only disk; a value json cannot encode
                self.fail(exc)
        if self._pending_bytes >= FLUSH_BYTES:
            self.flush()

    def _write(self, stamp: float, event: Any) -> None:
        owner = _writer().owner
        first = self.path is None
        if first:
            self.run_id = event.run_id
            self._directory.mkdir(parents=True, exist_ok=True)
            self.path = self._directory / f"{event.run_id}.jsonl"
            owner.take(self._directory)  # before any line names this process as the trace's writer
            self._owned = True
        fields = self._request_record(event) if isinstance(event, ModelRequested) else vars(event)
        record = {"ts": datetime.fromtimestamp(stamp, UTC).isoformat(timespec="milliseconds"), **fields}
        # A tool's whole result kept for read_result stays whole, as the run keeps it (`runs show` tells it).
        whole = record.pop("full_result", None) if isinstance(event, ToolCallFinished) and event.kept else None
        if trace_values.oversized(record):
            record = trace_values.bounded(record, self._redact)
        if whole is not None:
            record["full_result"] = whole
        line = self._redact(json.dumps(record, ensure_ascii=False, default=trace_values.default))
        # A lone surrogate (a model's "\ud800") is written as that JSON escape, not lost with the whole trace.
        encoded = line.encode("utf-8", "backslashreplace")
        if first:  # named after redaction, which must not touch the id
            encoded = owner.prefix + encoded[1:]
        self._pending.append(encoded + b"\n")
        self._pending_bytes += len(encoded) + 1

    def _request_record(self, event: ModelRequested) -> dict[str, Any]:
        request, last = event.request, self._last_request
        self._last_request = request
        known = len(last.messages) if last is not None else 0
        if request.messages[:known] != (last.messages if last is not None else ()):
            known = 0  # the transcript was rewritten, not extended: write it whole (tuples compare by identity first)
        fields: dict[str, Any] = {"messages_from": known, "messages": request.messages[known:]}
        if last is None or last.system != request.system:
            fields["system"] = request.system
        if last is None or last.tools != request.tools:
            fields["tools"] = request.tools
        fields |= {"tool_choice": request.tool_choice, "max_output_tokens": request.max_output_tokens}
        return {"step": event.step, "request": fields, "kind": event.kind}

    def flush(self) -> None:
        """Append the records waiting in memory to the file, which is not kept open after."""
        if not self._pending or self.path is None:
            return
        data, self._pending, self._pending_bytes = b"".join(self._pending), [], 0
        try:
            fd = os.open(self.path, _APPEND, 0o666)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
        except OSError as exc:
            self.fail(exc)

    def fail(self, exc: BaseException) -> None:
        self._broken = True
        self._pending, self._pending_bytes = [], 0
        self._let_go()
        _warn("trace_not_written", self, f"{type(exc).__name__}: {exc}")

    def close(self) -> None:
        try:
            self.flush()
            self._let_go()
        finally:
            with self._lock:
                self._closed = True
                callback, self._on_closed = self._on_closed, None
            if callback is not None:
                callback()

    def _let_go(self) -> None:
        """This trace no longer keeps its directory's writer lock held (once it is written, or cannot be)."""
        if self._owned:
            self._owned = False
            _writer().owner.let_go(self._directory)


def _resolve(closed: asyncio.Future[None]) -> None:
    if not closed.done():  # (a run cancelled while it waited has cancelled it)
        closed.set_result(None)


def _warn(event: str, trace: _TraceFile, error: str) -> None:
    # A fresh logger each time: tests and the CLI reconfigure structlog, and a cached one would miss that.
    structlog.get_logger(__name__).warning(event, run_id=trace.run_id, path=str(trace.path), error=error)


class _Writer:
    """The process's one trace writer: a daemon thread that takes (trace, record) pairs off a queue in order."""

    def __init__(self) -> None:
        self.owner = trace_owners.Owner()
        self._queue: queue.SimpleQueue[tuple[_TraceFile, Any]] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name="meta-agent-traces", daemon=True)
        self._thread.start()

    def put(self, trace: _TraceFile, item: Any) -> None:
        self._queue.put((trace, item))

    def _work(self) -> None:
        unflushed: set[_TraceFile] = set()
        handled = 0
        while True:
            trace, item = self._queue.get()
            try:
                trace.handle(item)
            except Exception as exc:  # a bug of ours must cost one trace, not every later run's trace
                trace.fail(exc)
            unflushed.add(trace)
            handled += 1
            # Flushed once per burst, not per record, and at least every FLUSH_EVERY items of a long one: records
            # still reach the OS promptly.
            if self._queue.empty() or handled >= FLUSH_EVERY:
                for pending in unflushed:
                    pending.flush()
                unflushed.clear()
                handled = 0


_WRITER: _Writer | None = None
_WRITER_LOCK = threading.Lock()


def _writer() -> _Writer:
    global _WRITER
    if _WRITER is None:
        with _WRITER_LOCK:  # two event loops in two threads must not start two writers
            if _WRITER is None:
                _WRITER = _Writer()
    return _WRITER


# -- reading: which traces a live process still writes (records/trace_owners.py) -------------------------------------


def read_trace(path: Path) -> tuple[bytes, bool]:
    """The bytes of the trace at `path`, and whether a live process was still writing it when they were read.

    When its writer is found dead, what it wrote after the first read is read too: a trace read without a live
    writer is all that writer wrote.

    Raises:
        OSError: the file cannot be read (missing, not a regular file, no permission).
    """
    with _open_regular(path) as file:
        data = file.read()
        while not trace_owners.is_live(path.parent, trace_owners.last_writer(data)):
            more = file.read()
            if not more:
                return data, False
            data += more
        return data, True


def trace_is_live(path: Path) -> bool:
    """Whether a live process is still writing the trace at `path` (False for a missing or unreadable file)."""
    try:
        return read_trace(path)[1]
    except OSError:
        return False


def _open_regular(path: Path) -> IO[bytes]:
    """Open a regular file to read. Non-blocking, so a FIFO named like a trace cannot hang the reader.

    Raises:
        OSError: as open() does, or the path is a directory, a FIFO or a device.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def prune_traces(directory: Path, max_age_days: float) -> int:
    """Delete traces older than `max_age_days` that no live run is writing, and the locks of writers gone; returns
    how many traces. Missing directories and races are fine."""
    cutoff = time.time() - max_age_days * 86400
    removed = 0
    for path in directory.glob("*.jsonl") if directory.is_dir() else ():
        try:
            if path.stat().st_mtime < cutoff and not trace_is_live(path):
                path.unlink()
                removed += 1
        except OSError:
            continue
    trace_owners.prune_writers(directory)
    return removed
