"""Which traces a live process is still writing, told without holding any trace open (README, Traces: a parked run
holds no file descriptor while it waits).

A process names itself in the first record it writes to each trace: the line begins `{"writer": "<its id>", `.
While it has a trace in a directory that it has not closed, it holds an exclusive flock on
`<directory>/.writers/<its id>.lock`: one descriptor per directory, however many runs are live or parked there.
flock belongs to the open file: the OS releases it when the file is closed or its process ends, however it ends
(SIGKILL included), and files Python opens are not inherited by child processes, so a child cannot keep a dead
process's traces "live". Two opens of one file conflict even inside one process. So a trace without its last
record is being written while the lock of the writer it names last is held; else it was interrupted.

Windows has no flock: there nothing can tell, so no trace counts as live (an unfinished trace is listed as
interrupted), and pruning goes by a trace's age alone (a live run writes to its trace far more often than that).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path

if sys.platform != "win32":
    import fcntl

WRITERS = ".writers"  # the lock files' directory, inside the trace directory
NAMED = b'{"writer": "'  # how a line that names its writer begins
_ID = re.compile(rb'([0-9]{1,10}-[0-9a-f]{12})"')  # the writer's process id, and a random part: never reused
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


class Owner:
    """This process as the writer of traces: its id, and its locks. Used by the writer thread alone."""

    def __init__(self) -> None:
        self.id = f"{os.getpid()}-{os.urandom(6).hex()}"
        self.prefix = NAMED + self.id.encode() + b'", '  # a line naming it starts so, then the record's first key
        self._held: dict[Path, tuple[int, int]] = {}  # directory -> (the lock's descriptor, its unclosed traces)

    def take(self, directory: Path) -> None:
        """One more unclosed trace in `directory`: its lock is held until every one is let go.

        Raises:
            OSError: the lock file cannot be made or locked.
        """
        if sys.platform == "win32":
            return
        fd, traces = self._held.get(directory) or (_lock(directory / WRITERS / f"{self.id}.lock"), 0)
        self._held[directory] = (fd, traces + 1)

    def let_go(self, directory: Path) -> None:
        """A trace of `directory` is closed: the lock goes with the last one."""
        held = self._held.pop(directory, None)
        if held is None:
            return
        fd, traces = held
        if traces > 1:
            self._held[directory] = (fd, traces - 1)
        else:
            os.close(fd)  # releases the lock


def _lock(path: Path) -> int:
    """An open, exclusively locked `path`.

    Raises:
        OSError: it cannot be made or locked.
    """
    path.parent.mkdir(exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # waits only while a reader or `prune_writers` looks at it
            if _same(fd, path):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # `prune_writers` deleted it while we waited: make it again


def _same(fd: int, path: Path) -> bool:
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)


def last_writer(data: bytes) -> str | None:
    """The id of the writer the last line of `data` that names one names (a record's first key, so no value of a
    record can pass for it: a newline inside a value is written as an escape)."""
    at = data.rfind(b"\n" + NAMED) + 1  # 0: none after the first line
    if at == 0 and not data.startswith(NAMED):
        return None
    found = _ID.match(data, at + len(NAMED))
    return found.group(1).decode() if found else None


def is_live(directory: Path, writer: str | None) -> bool:
    """Whether `writer` still holds its lock in `directory`: a process that still writes a trace there."""
    if writer is None or sys.platform == "win32":
        return False
    try:
        fd = os.open(directory / WRITERS / f"{writer}.lock", _OPEN_FLAGS)
    except OSError:
        return False  # never made, or pruned: its process ended
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # and with it the shared lock, at once: a writer taking its lock never waits long
    return False


def prune_writers(directory: Path) -> None:
    """Delete the lock files of writers that hold them no more (their processes ended, or have no trace open)."""
    if sys.platform == "win32":
        return
    with contextlib.suppress(OSError):
        for path in (directory / WRITERS).glob("*.lock"):
            with contextlib.suppress(OSError):
                fd = os.open(path, _OPEN_FLAGS)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    path.unlink()  # while locked: a writer taking it meanwhile finds it gone, and makes it again
                finally:
                    os.close(fd)
