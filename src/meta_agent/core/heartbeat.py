"""The heartbeats of a run: while a model turn, a tool call or a user's answer is slow, a beat repeats.

Hosts reset their request timeout on progress, so a beat keeps a slow run alive; each beat is a `Heartbeat` event.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import anyio

T = TypeVar("T")

# Hosts reset their request timeout on progress; a beat this often keeps a slow call alive.
HEARTBEAT_INTERVAL = 10.0


@dataclass(eq=False)
class _Wait:
    step: int
    waiting_for: str
    started: float
    beats: int = 0


class Pulse:
    """The heartbeats of one run, from one task (`run`): every wait (`wait`) still running after each `every`
    seconds gets a beat with the seconds elapsed. A wait costs a set insertion, not a task."""

    def __init__(self, every: float, beat: Callable[[int, str, float], Awaitable[None]]) -> None:
        self._every = every
        self._beat = beat
        self._waits: set[_Wait] = set()

    async def wait(self, step: int, waiting_for: str, work: Awaitable[T]) -> T:
        waiting = _Wait(step, waiting_for, anyio.current_time())
        self._waits.add(waiting)
        try:
            return await work
        finally:
            self._waits.discard(waiting)

    async def run(self) -> None:
        """Beat until cancelled; a beat is at most a quarter interval late."""
        every = self._every
        while True:
            await anyio.sleep(every / 4)
            now = anyio.current_time()
            for waiting in [w for w in self._waits if now - w.started >= (w.beats + 1) * every]:
                waiting.beats = int((now - waiting.started) // every)
                await self._beat(waiting.step, waiting.waiting_for, now - waiting.started)
