"""Logging and run traces.

Logging: structlog to stderr, readable in a terminal and JSON lines otherwise; never to stdout. Library loggers (the
MCP SDK, httpx2) go through the same renderer. Below debug level an exception in a log line is one `error=...` field,
not a traceback. Lines logged during a run carry its `run_id`.

Traces: every event of a run, with the model requests and responses and the tool results in full, as JSON lines in
`<META_AGENT_TRACE_DIR>/<run_id>.jsonl`, with secrets redacted. A `model_requested` record holds what is new since
the run's previous request: the messages from index `messages_from` on, and the system prompt and tool schemas only
when they changed. The records of a trace, read in order, give every request in full, and a step costs the same
whatever the length of the transcript.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import structlog

from meta_agent.events import ModelRequested
from meta_agent.messages import ModelRequest, jsonable

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure_logging(level: str = "info", *, stream: TextIO | None = None, json: bool | None = None) -> None:
    """Send every log line to `stream` (stderr by default) at `level` and above; JSON unless it is a terminal."""
    stream = stream or sys.stderr
    if json is None:
        json = not stream.isatty()
    debug = level == "debug"
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if not debug:
        shared.append(_exception_as_one_line)
    renderer: Any = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            *([structlog.processors.format_exc_info] if debug and json else []),
            renderer,
        ],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(LEVELS[level])
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )


def _exception_as_one_line(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
    exc_info = event.pop("exc_info", None)
    if exc_info is True:
        exc_info = sys.exc_info()
    error = exc_info[1] if isinstance(exc_info, tuple) else exc_info
    if isinstance(error, BaseException):
        text = str(error).strip().splitlines()
        event["error"] = f"{type(error).__name__}: {text[0]}" if text else type(error).__name__
    return event


# -- run traces ----------------------------------------------------------------------------------------------------

REDACTED = "[redacted]"
# Environment variables whose values are secrets wherever they turn up.
_SECRET_NAME = re.compile(r"(?i)(api_?key|token|secret|password|passwd|credential|auth)")
_BEARER = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{4,}")
_KEY_SHAPED = re.compile(r"\b(sk-[A-Za-z0-9_-]{8,})")
_MIN_SECRET = 4  # shorter values ("1", "on") are not worth hiding and would mangle the trace


def default_trace_dir(environ: Mapping[str, str]) -> Path:
    """The user state dir: $XDG_STATE_HOME/meta-agent/traces, else ~/.local/state/meta-agent/traces."""
    base = environ.get("XDG_STATE_HOME") or str(Path(environ.get("HOME", "~")).expanduser() / ".local" / "state")
    return Path(base) / "meta-agent" / "traces"


class Redactor:
    """Replaces known secret values, bearer tokens and key-shaped strings in text."""

    def __init__(self, secrets: Iterable[str]) -> None:
        found = {s for s in secrets if len(s) >= _MIN_SECRET}
        # a secret as it appears inside a JSON string, too
        found |= {json.dumps(s)[1:-1] for s in found}
        self._secrets = sorted(found, key=len, reverse=True)

    @classmethod
    def of(cls, environ: Mapping[str, str], servers: Mapping[str, Any]) -> Redactor:
        """Secrets of the environment (by the variable's name) and every env and header value of servers.json."""
        secrets = [value for name, value in environ.items() if _SECRET_NAME.search(name)]
        for entry in servers.values():
            secrets.extend(entry.env.values())
            secrets.extend(entry.headers.values())
        return cls(secrets)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        # The patterns run only where their literal part occurs: scanning for it is many times faster.
        if "bearer" in text.lower():
            text = _BEARER.sub(lambda m: m.group(1) + REDACTED, text)
        return _KEY_SHAPED.sub(REDACTED, text) if "sk-" in text else text


class TraceWriter:
    """The trace sink: `<dir>/<run_id>.jsonl`, one JSON object per event, secrets redacted. A trace that cannot be
    written is a warning, once; the run goes on."""

    def __init__(self, directory: Path, redact: Redactor) -> None:
        self._directory = directory
        self._redact = redact
        self._file: TextIO | None = None
        self._broken = False
        self.path: Path | None = None
        self._last_request: ModelRequest | None = None

    async def __call__(self, event: Any) -> None:
        if self._broken:
            return
        try:
            if self._file is None:
                self._directory.mkdir(parents=True, exist_ok=True)
                self.path = self._directory / f"{event.run_id}.jsonl"
                self._file = self.path.open("a", encoding="utf-8")
            fields = self._request_record(event) if isinstance(event, ModelRequested) else vars(event)
            record = {"ts": datetime.now(UTC).isoformat(timespec="milliseconds"), **fields}
            self._file.write(self._redact(json.dumps(record, ensure_ascii=False, default=jsonable)) + "\n")
            self._file.flush()
            if event.kind in ("run_finished", "run_failed"):
                self.close()
        except (OSError, AttributeError) as exc:
            self._broken = True
            self.close()
            structlog.get_logger("meta_agent.tracing").warning("trace_not_written", error=str(exc))

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

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None


def prune_traces(directory: Path, max_age_days: float) -> int:
    """Delete traces older than `max_age_days`; returns how many. Missing directories and races are fine."""
    cutoff = time.time() - max_age_days * 86400
    removed = 0
    for path in directory.glob("*.jsonl") if directory.is_dir() else ():
        try:
            if path.stat().st_mtime < cutoff:
                path.unlink()
                removed += 1
        except OSError:
            continue
    return removed
