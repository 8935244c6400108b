"""Logging: structlog to stderr, readable in a terminal and JSON lines otherwise; never to stdout.

Library loggers (the MCP SDK, httpx2) go through the same renderer. Below debug level an exception in a log line is
one `error=...` field, not a traceback. Lines logged during a run carry its `run_id`; each line names the module
that logged it (`logger`), as every module of the package logs under its own `__name__`. Our own lines (not the
libraries') are also handed to every log tap (`add_log_tap`), whatever the level on stderr: that is how an MCP host gets
them (meta_agent.front.host_logs).
"""

from __future__ import annotations

import logging
import sys
import weakref
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any, TextIO

import structlog

from meta_agent.errors import summary

LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
LogTap = Callable[[Mapping[str, Any]], None]
# Held weakly: a tap goes when whatever owns it (a server) does.
_taps: weakref.WeakSet[LogTap] = weakref.WeakSet()


def add_log_tap(tap: LogTap) -> None:
    """Hand every structlog line of ours to `tap` as well, as an event dict, on the thread that logs it; `tap` must
    neither block nor log. It is held weakly: keep a reference for as long as it should run."""
    _taps.add(tap)


def forward_to_taps(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """The structlog processor that hands each line to the log taps (configure_logging puts it in the chain)."""
    for tap in list(_taps):
        tap(event)
    return event


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
    root.setLevel(LOG_LEVELS[level])
    structlog.configure(
        # Not in `shared`, which also formats the libraries' lines: the taps get our own lines only.
        processors=[*shared, forward_to_taps, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
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
        event["error"] = summary(error)
    return event
