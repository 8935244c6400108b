"""A stdio child in its own process group, and the whole group ended on every path.

The SDK's `stdio_client` also starts the child in a new session, but it signals that group only when the direct
process outlives the grace period after its stdin closes. A grandchild (`npx` → node, `uv run` → python, a shell
wrapper → the real server, a helper a server launched) whose parent exited or died was left running, often holding
the pipes open, and a dead direct process went unnoticed while a grandchild held them. Here the group is ended
whenever the connection ends — closed, cancelled, failed — and as soon as the direct process dies: stdin closed,
then SIGTERM to the group, then SIGKILL, each after a grace period.

What this relies on (POSIX): `start_new_session=True` makes the child a session and process-group leader whose pgid
is its pid; descendants stay in that group unless they leave it themselves (a daemon calling setsid, or a browser
started detached in a group of its own as browser-automation libraries do, escapes by
design); `killpg` reaches every member, also after the leader is gone; a group id is not reused while any member
lives. A zombie still counts as a member until it is reaped, so where init does not reap orphans the waits below run
their full length (the group is signalled all the same).

Windows has no process groups: there the SDK's own `stdio_client` runs the child in a Job Object created with
KILL_ON_JOB_CLOSE, and closing the connection closes the job, which kills every process still in it. The grace
period applies to the direct process only, and nothing gets a polite SIGTERM first (Windows has none). The job is
assigned just after the spawn, so a process the child starts in that moment is not in it (the SDK says so too).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import TextIO

import anyio
import structlog
from anyio.abc import ByteReceiveStream, ByteSendStream, Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client
from mcp.shared.message import SessionMessage

from meta_agent.children.stdout import LINE_LIMIT, received
from meta_agent.shared.bounded_lines import lines_within

log = structlog.get_logger(__name__)

# After its stdin closes, a well-behaved server and its family exit on their own within this (the SDK's figure).
STDIN_GRACE = 2.0
# After SIGTERM, the time the group gets to clean up before SIGKILL.
TERM_GRACE = 2.0
# After SIGKILL, the time for the event loop to see the leader die; only an unkillable process runs this out.
KILL_REAP = 2.0
# How often a wait for the group to be gone looks again.
GROUP_POLL = 0.01
# How soon the death of the direct process is noticed while its descendants keep the pipes open (a closed pipe is
# noticed at once). anyio's Process.wait() also waits for the pipes on some versions, so the return code is polled.
LEADER_POLL = 0.25
# Bytes read from a pipe at a time.
CHUNK = 65536

# Process group id → child name, from spawn until the group has been ended: what a second signal is still waiting for.
_RUNNING: dict[int, str] = {}


def running_children() -> list[str]:
    """The names of the children whose process groups have not been ended yet."""
    return sorted(set(_RUNNING.values()))


def kill_every_group() -> None:
    """SIGKILL every child's process group that has not been ended, at once and from any thread: for a process that
    must leave without its event loop (cli/watchdog.py), so that it leaves no orphans."""
    for pgid in list(_RUNNING):
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


class ProcessGroup:
    """A child's process group: the direct process (the leader, whose pid is the group id) and every descendant
    that stayed in the group."""

    def __init__(self, name: str, leader: Process) -> None:
        self.name = name
        self.leader = leader
        self._lock = anyio.Lock()
        self._ended = False
        self.signalled = False  # whether we sent the group a signal: the leader's exit status is then ours
        _RUNNING[leader.pid] = name

    async def end(self) -> None:
        """Close the leader's stdin, then SIGTERM, then SIGKILL the whole group, each only if some member outlived
        the grace period before. Shielded and bounded; a second call waits for the first and returns."""
        with anyio.CancelScope(shield=True):
            async with self._lock:
                if self._ended:
                    return
                try:
                    await self._escalate()
                finally:
                    self._ended = True
                    _RUNNING.pop(self.leader.pid, None)

    async def _escalate(self) -> None:
        with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            assert self.leader.stdin is not None
            await self.leader.stdin.aclose()
        if not await self._gone_within(STDIN_GRACE):
            log.info("child_group_signalled", server=self.name, signal="SIGTERM")
            self._signal(signal.SIGTERM)
            if not await self._gone_within(TERM_GRACE):
                log.warning("child_group_signalled", server=self.name, signal="SIGKILL")
                self._signal(signal.SIGKILL)
        # The leader is reaped on another thread and the event loop hears of it a moment later; until then its
        # pipes and transport cannot be closed.
        with anyio.move_on_after(KILL_REAP):
            while self.leader.returncode is None:
                await anyio.sleep(GROUP_POLL)
            return
        log.warning("child_unkillable", server=self.name, pid=self.leader.pid)

    async def _gone_within(self, seconds: float) -> bool:
        with anyio.move_on_after(seconds):
            while self._alive():
                await anyio.sleep(GROUP_POLL)
            return True
        return False

    def _alive(self) -> bool:
        try:
            os.killpg(self.leader.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # a member we may not signal (or, on macOS, a zombie): not proof the group is gone
        return True

    def _signal(self, signum: int) -> None:
        self.signalled = True
        with suppress(ProcessLookupError, PermissionError):  # gone since the last look; or all we may signal
            os.killpg(self.leader.pid, signum)


Streams = tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]


@asynccontextmanager
async def stdio_child(
    name: str, params: StdioServerParameters, errlog: TextIO, on_exit: Callable[[int], None] | None = None
) -> AsyncIterator[Streams]:
    """An MCP transport to a child started from `params` in its own process group, with its stderr going to
    `errlog`; leaving it (or the death of the child's direct process) ends the whole group. `on_exit` hears the
    direct process's exit status once the group has ended, unless a signal of ours ended it (POSIX).

    Raises:
        OSError: the command cannot be started (FileNotFoundError, PermissionError...).
    """
    if sys.platform == "win32":
        async with stdio_client(params, errlog=errlog) as streams:
            yield streams
        return
    # Shielded: a spawn cancelled half-way leaves a process that asyncio kills but never reaps (its waiter thread
    # then calls into a closed event loop), and whose group nobody ends. Spawning is a fork and an exec: bounded.
    with anyio.CancelScope(shield=True):
        leader = await anyio.open_process(
            [params.command, *params.args],
            env=get_default_environment() | (params.env or {}),
            stderr=errlog,
            cwd=params.cwd,
            start_new_session=True,
        )
    group = ProcessGroup(name, leader)
    to_session, from_child = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    to_child, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    assert leader.stdin is not None and leader.stdout is not None
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_read, leader.stdout, to_session, params)
            tg.start_soon(_write, leader.stdin, from_session, to_session, params)
            tg.start_soon(_end_when_the_leader_exits, group)
            try:
                yield from_child, to_child
            finally:
                # The session is done: the reader drains the child's stdout from now on, so a child blocked writing
                # there can still see its stdin close and exit.
                from_child.close()
                to_child.close()
                await group.end()
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await group.end()  # if spawning the tasks failed; else already done
            if leader.returncode is not None:  # else an unkillable leader, already reported: abandon it
                if on_exit is not None and not group.signalled:  # its own exit (a crash, or its end on EOF)
                    on_exit(leader.returncode)
                await leader.aclose()


async def _end_when_the_leader_exits(group: ProcessGroup) -> None:
    """The child is its direct process: once that is gone, its family goes too, and the connection with it."""
    while group.leader.returncode is None:
        await anyio.sleep(LEADER_POLL)
    await group.end()


async def _read(
    stdout: ByteReceiveStream,
    to_session: MemoryObjectSendStream[SessionMessage | Exception],
    params: StdioServerParameters,
) -> None:
    """Each line of the child's stdout is a message (or the error parsing it) for the session, until the child's
    stdout ends; no line is held past its limit (children/stdout.py); once the session has gone, what follows is read
    and dropped."""
    delivering = True
    async with to_session:
        async for line in lines_within(lambda: _receive(stdout), LINE_LIMIT):
            if not delivering:
                continue
            try:
                for item in received(line, params):
                    await to_session.send(item)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                delivering = False


async def _write(
    stdin: ByteSendStream,
    from_session: MemoryObjectReceiveStream[SessionMessage],
    to_session: MemoryObjectSendStream[SessionMessage | Exception],
    params: StdioServerParameters,
) -> None:
    try:
        async with from_session:
            async for message in from_session:
                text = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                await stdin.send(text.encode(params.encoding, params.encoding_error_handler))
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        await to_session.aclose()  # the child cannot hear us: the session must see the connection end, not hang


async def _receive(stream: ByteReceiveStream) -> bytes:
    """The next bytes of `stream`; b"" once it has ended or was closed under us."""
    try:
        return await stream.receive(CHUNK)
    except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        return b""
