"""Logging: structlog to stderr, readable in a terminal and JSON lines otherwise; never to stdout.

Library loggers (the MCP SDK, httpx2, uvicorn, DBOS, SQLAlchemy) go through the same renderer, and so do what Python
would otherwise print on stderr by itself: warnings, logging's `lastResort`, exceptions nobody caught in a thread or
that could not be raised (`sys.unraisablehook`), and the asyncio loop's exception handler (which logs to `asyncio`).
Each line is one JSON object on one line (one text line on a terminal): below debug level an exception in a log line
is one `error=...` field; at debug its traceback is the `exception` field (`traceback` on a terminal), never lines of
its own. A repeated line is written at most once a second per kind, with the count of those held back, and a line a
child can make us write at will at most `SOURCE_BUDGET` times a second per child (log_repeats).
Values hidden with `hide` (a webhook's URL path and query, its header values) are `[redacted]` in every line, the
libraries' own included, and every URL in a line's strings is cut to its scheme, host, port and path (`urls_cut`: a
query, user info or fragment may hold a token), in the lines handed to the taps too. Lines logged during a run carry
its `run_id`; each line names the module that logged it (`logger`), as every module of the package logs under its own
`__name__`. Our own lines (not the libraries') are also handed to every log tap (`add_log_tap`), whatever the level on
stderr: that is how an MCP host gets them (meta_agent.front.host_logs).
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from json import dumps
from types import TracebackType
from typing import Any, TextIO
from urllib.parse import quote, quote_plus

import structlog

from meta_agent.errors import summary
from meta_agent.records.log_repeats import REPEATED, SOURCE_BUDGET, Repeats, kind_of, source_of
from meta_agent.shared.urls import loggable_urls

LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
LogTap = Callable[[Mapping[str, Any]], None]
# Held weakly: a tap goes when whatever owns it (a server) does.
_taps: weakref.WeakSet[LogTap] = weakref.WeakSet()
REDACTED = "[redacted]"
# Shorter values ("/", "1", "json") are not worth hiding and would mangle every line that holds them.
MIN_HIDDEN = 4
# Library loggers that put a handler of their own on stderr (DBOS prints multi-line tracebacks): routed through ours.
OWN_HANDLERS = ("dbos",)
# Characters of a line that could not be formatted quoted in the line that says so.
UNWRITABLE_SHOWN = 200
_hidden: set[str] = set()
_hiding: re.Pattern[str] | None = None
log = structlog.get_logger(__name__)


def add_log_tap(tap: LogTap) -> None:
    """Hand every structlog line of ours to `tap` as well, as an event dict, on the thread that logs it; `tap` must
    neither block nor log. It is held weakly: keep a reference for as long as it should run."""
    _taps.add(tap)


def forward_to_taps(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """The structlog processor that hands each line to the log taps (configure_logging puts it in the chain)."""
    for tap in list(_taps):
        tap(event)
    return event


def urls_cut(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """The structlog processor that makes every URL in the line's strings (inside lists and dicts too, and the
    traceback of `exception`) a `loggable_url`: whoever logs a URL, a library or we, its query, user info and
    fragment are never written."""
    for key, value in event.items():
        event[key] = _urls_cut_in(value)
    return event


def _urls_cut_in(value: Any) -> Any:
    if isinstance(value, str):
        return loggable_urls(value)
    if isinstance(value, list):
        return [_urls_cut_in(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_urls_cut_in(item) for item in value)
    if isinstance(value, dict):
        return {key: _urls_cut_in(item) for key, item in value.items()}
    return value


def hide(values: Iterable[str]) -> None:
    """Write each of `values` as `[redacted]` in every log line from now on, and in `redacted`'s text: as it is, as
    inside a JSON string and percent-encoded as a URL holds it. What is hidden stays hidden (a reload may add)."""
    global _hiding
    found = {value for value in values if len(value) >= MIN_HIDDEN}
    forms = (
        found | {dumps(v)[1:-1] for v in found} | {quote(v, safe="") for v in found} | {quote_plus(v) for v in found}
    )
    if forms - _hidden:
        _hidden.update(forms)
        # the longest first, so that a value that holds another is hidden whole
        _hiding = re.compile("|".join(re.escape(v) for v in sorted(_hidden, key=len, reverse=True)))


def redacted(text: str) -> str:
    """`text` with every value given to `hide` replaced by `[redacted]`."""
    hiding = _hiding
    return hiding.sub(REDACTED, text) if hiding is not None else text


def configure_logging(level: str = "info", *, stream: TextIO | None = None, json: bool | None = None) -> None:
    """Send every log line to `stream` at `level` and above. On stderr, what Python would print there by itself is
    logged too: warnings and uncaught or unraisable exceptions (the process's hooks, which a test's own stream leaves
    alone). Call it before the engine starts: structlog's own default would print on stdout.

    Args:
        level: `debug`, `info`, `warning` or `error`.
        stream: where the lines go; None: stderr, and the process's hooks with it.
        json: one JSON object a line, or text; None: JSON unless `stream` is a terminal.
    """
    process_wide = stream is None
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
            _repeated,
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            *([structlog.processors.format_exc_info] if debug else []),
            urls_cut,
            *([] if json else [_on_one_line]),
            renderer,
        ],
    )
    handler = _LineHandler(stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(LOG_LEVELS[level])
    structlog.configure(
        # Not in `shared`, which also formats the libraries' lines: the taps get our own lines only. A line its
        # source's budget holds back is dropped first, before any work is spent on it.
        processors=[
            handler.drop_held_back,
            *shared,
            urls_cut,
            forward_to_taps,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    _route_the_rest(handler, process_wide=process_wide)


def route_through_ours(name: str) -> None:
    """Have the library logger `name` hand its lines to ours (the root's handler) instead of a stderr handler of its
    own, and keep it from adding one (DBOS adds its handler only to a logger that has none)."""
    logger = logging.getLogger(name)
    for handler in list(logger.handlers):
        if type(handler) is logging.StreamHandler:
            logger.removeHandler(handler)
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    logger.propagate = True


class _LineHandler(logging.StreamHandler):  # type: ignore[type-arg]  # generic in typeshed only
    """Each record as one line on the stream, hidden values redacted, repeats and floods held back (log_repeats)."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self._sources = Repeats(super().handle, SOURCE_BUDGET)
        self._repeats = Repeats(self._within_budget)

    def handle(self, record: logging.LogRecord) -> bool:
        kind = kind_of(record)
        if kind is None:
            return bool(super().handle(record))
        held = self._repeats.admit(kind, record)
        if held is None:
            return False
        if held:
            setattr(record, REPEATED, held)
        return self._within_budget(record)

    def _within_budget(self, record: logging.LogRecord) -> bool:
        """Write `record` unless its source has had its lines this second (then it is counted, with the lines it
        stands for)."""
        source = source_of(record.name, record.msg)
        if source is not None:
            held = self._sources.admit(source, record, 1 + getattr(record, REPEATED, 0))
            if held is None:
                return False
            if held:
                setattr(record, REPEATED, getattr(record, REPEATED, 0) + held)
        return bool(super().handle(record))

    def drop_held_back(self, logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        """The structlog processor that drops (and counts) a line of ours whose source is over its budget, before
        it is formatted or handed to the taps."""
        source = source_of(getattr(logger, "name", ""), event)
        if source is not None and self._sources.held_back(source):
            raise structlog.DropEvent
        return event

    def format(self, record: logging.LogRecord) -> str:
        return redacted(super().format(record))

    def handleError(self, record: logging.LogRecord) -> None:
        """A line that cannot be formatted (a library's bad format arguments) is one line saying so, not logging's
        multi-line report; a stream that cannot be written to (a closed pipe) is let be."""
        error = sys.exc_info()[1]
        why = summary(error) if error is not None else "unknown"
        said = loggable_urls(str(record.msg)[:UNWRITABLE_SHOWN])
        line = {"event": "log_line_unwritable", "level": "error", "logger": record.name, "message": said, "error": why}
        try:
            self.stream.write(redacted(dumps(line)) + "\n")
            self.flush()
        except Exception:  # there is nowhere left to say it
            pass

    def close(self) -> None:
        self._repeats.close()  # its late lines go through the budgets, then theirs are written
        self._sources.close()
        super().close()


def _route_the_rest(handler: logging.Handler, *, process_wide: bool) -> None:
    """Route through `handler` what would reach stderr past the loggers: a logger with no handler anywhere, and
    `process_wide`, warnings, uncaught exceptions of threads and of the main thread, and exceptions that could not
    be raised."""
    logging.lastResort = handler
    for name in OWN_HANDLERS:
        route_through_ours(name)
    if not process_wide:
        return
    logging.captureWarnings(True)
    sys.excepthook = _uncaught
    sys.unraisablehook = _unraisable
    threading.excepthook = _thread_uncaught


def _uncaught(kind: type[BaseException], error: BaseException, traceback: TracebackType | None) -> None:
    log.critical("uncaught_exception", exc_info=(kind, error, traceback))


def _unraisable(unraisable: Any) -> None:
    error = unraisable.exc_value
    exc_info = (type(error), error, unraisable.exc_traceback) if error is not None else None
    log.error(
        "unraisable_exception",
        message=unraisable.err_msg or "Exception ignored in",
        object=repr(unraisable.object),
        exc_info=exc_info,
    )


def _thread_uncaught(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:  # how a thread ends on purpose, as Python's own hook has it
        return
    thread = args.thread.name if args.thread is not None else "?"
    error = args.exc_value if args.exc_value is not None else args.exc_type()
    log.error("thread_exception", thread=thread, exc_info=(args.exc_type, error, args.exc_traceback))


def _repeated(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """The count of lines of its kind held back before this one, as the field `repeated` (log_repeats)."""
    held = getattr(event.get("_record"), REPEATED, None)
    if held:
        event["repeated"] = held
    return event


def _on_one_line(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """For the terminal's renderer, which writes `exception` and `stack` on lines of their own, and the event as it
    is: those as the fields `traceback` and `stack_info` (a field with a line end is written as its repr, on one
    line), and the line ends of the event (a library's multi-line message) as `\\n`."""
    for key, field in (("exception", "traceback"), ("stack", "stack_info")):
        if key in event:
            event[field] = event.pop(key)
    text = event.get("event")
    if isinstance(text, str) and ("\n" in text or "\r" in text):
        event["event"] = text.replace("\r\n", "\\n").replace("\n", "\\n").replace("\r", "\\n")
    return event


def _exception_as_one_line(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
    exc_info = event.pop("exc_info", None)
    if exc_info is True:
        exc_info = sys.exc_info()
    error = exc_info[1] if isinstance(exc_info, tuple) else exc_info
    if isinstance(error, BaseException):
        event["error"] = summary(error)
    return event
