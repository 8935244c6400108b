"""The stall watchdog of `meta-agent serve`: a process whose event loop has stopped turning leaves, so that its
supervisor starts it again and, on PostgreSQL, another replica takes its runs (README, Replicas on PostgreSQL).

The event loop marks each turn it takes (a task that wakes every TICK, a second). A thread looks at the mark; when the
loop has not turned for `META_AGENT_STALL_SECONDS`, it logs one line (`event_loop_stalled`, with what each run was
doing), ends the children's process groups and exits with status 70 (EX_SOFTWARE). That thread needs the
interpreter's lock, which a pure-Python loop hands over every few milliseconds, but work inside one C call (a regex
in `re`, a huge `json.loads`) may hold it for good. For that case the standard library's faulthandler, whose timer
runs on a C thread that needs no lock, is the backstop: some time later (BACKSTOP_GRACE, or the stall limit again) it
writes every thread's stack to a file of the trace directory (`stalled-PID.txt`; stderr stays JSON lines) and exits
with status 1. There the children are not signalled: they see their stdin close and end as they do when the host
goes away.

A process paused from outside (SIGSTOP, a debugger, a frozen container or VM) did not stall: the thread, which did not
run either, sees that it looked late, and counts the loop's stall from then on.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import TextIO

import anyio
import structlog

from meta_agent.children.stdio import kill_every_group

log = structlog.get_logger(__name__)

EXIT_STALLED = 70  # EX_SOFTWARE: a supervisor restarts the process; not a signal's status, not a usage error (2)
# How often the event loop marks that it turns, and how often the thread looks at the mark: at most this, and a
# quarter of the stall limit where that is shorter, so a loop that turns is never a mark's age away from the limit.
TICK = 1.0
# How long after the stall limit, at least, the faulthandler backstop ends a process whose thread could not: time for
# the thread to log its line and exit first whenever the interpreter's lock lets it. It is the stall limit itself
# where that is longer, so that a process paused for less than twice the limit (SIGSTOP, a frozen VM) lives on.
BACKSTOP_GRACE = 10.0
# A look of the thread this much later than due means that the thread was not running either (the process was paused,
# or the interpreter's lock held): the loop's stall is then counted from that look, not from before the pause.
PAUSED = 0.5

InProgress = Callable[[], list[str]]


@asynccontextmanager
async def watching_the_loop(stall_seconds: float, in_progress: InProgress, dump_dir: Path) -> AsyncIterator[None]:
    """While inside, a stall of the event loop over `stall_seconds` ends the process; `in_progress` says what the
    runs were doing (one line each), for the log line. Where faulthandler cannot be armed (no file for its dump), only
    the thread watches."""
    turned = [time.monotonic()]
    done = threading.Event()
    dump = _dump_file(dump_dir)
    left = (lambda: _remove(dump)) if dump is not None else (lambda: None)
    watcher = threading.Thread(
        target=_watch, args=(turned, done, stall_seconds, in_progress, left), name="meta-agent-watchdog", daemon=True
    )
    watcher.start()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_mark_turns, turned, stall_seconds, dump)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()
    finally:
        done.set()
        if dump is not None:
            faulthandler.cancel_dump_traceback_later()
            _remove(dump)  # nothing stalled: no file left behind


def _tick(stall_seconds: float) -> float:
    return min(TICK, stall_seconds / 4)


async def _mark_turns(turned: list[float], stall_seconds: float, dump: TextIO | None) -> None:
    while True:
        turned[0] = time.monotonic()
        if dump is not None:  # re-armed each turn: it fires only once the loop has not turned for the whole delay
            faulthandler.dump_traceback_later(stall_seconds + max(BACKSTOP_GRACE, stall_seconds), exit=True, file=dump)
        await anyio.sleep(_tick(stall_seconds))


def _watch(
    turned: list[float], done: threading.Event, stall_seconds: float, in_progress: InProgress, left: Callable[[], None]
) -> None:
    looked, tick = time.monotonic(), _tick(stall_seconds)
    while not done.wait(tick):
        now = time.monotonic()
        if now - looked > tick + PAUSED:  # this thread did not run either: the process was paused, or its lock held
            turned[0] = max(turned[0], now)  # what the loop did meanwhile is unknown: it is judged from now on
        looked = now
        stalled = now - turned[0]
        if stalled > stall_seconds and not done.is_set():
            left()
            _leave(stalled, in_progress)


def _remove(dump: TextIO) -> None:
    dump.close()
    with suppress(OSError):
        os.unlink(dump.name)


def _leave(stalled: float, in_progress: InProgress) -> None:
    """Log the stall, end the children's groups, exit 70: never returns."""
    try:
        runs = in_progress()
    except Exception as exc:  # read while the stalled loop may be changing it: say so, and leave all the same
        runs = [f"(could not be read: {type(exc).__name__})"]
    log.error("event_loop_stalled", stalled_s=round(stalled, 1), runs=runs, exit_status=EXIT_STALLED)
    kill_every_group()
    for stream in (sys.stderr, sys.stdout):
        with suppress(Exception):
            stream.flush()
    os._exit(EXIT_STALLED)


def _dump_file(directory: Path) -> TextIO | None:
    """The file faulthandler writes its dump to, in `directory`; None if it cannot be made there. The empty files of
    processes that were killed before they could remove theirs go."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for old in directory.glob("stalled-*.txt"):
            _remove_if_unused(old)
        return (directory / f"stalled-{os.getpid()}.txt").open("w", encoding="utf-8")
    except OSError as exc:
        log.warning("stall_backstop_off", error=str(exc))
        return None


def _remove_if_unused(path: Path) -> None:
    """Remove `path`, a dump file, if it is empty and its process is gone (one with a dump is kept for people)."""
    pid = path.stem.removeprefix("stalled-")
    with suppress(OSError, ValueError):
        if path.stat().st_size == 0 and not _alive(int(pid)):
            path.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
