"""The MCP progress sink: one `notifications/progress` per event, with a counter that only goes up."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from mcp.server.mcpserver import Context

from meta_agent.core import events as ev
from meta_agent.records.run_feed import progress_line


class Progress:
    """Reports events on one request's progress token; silent once closed, so nothing follows the result.

    `ticks` lets the rounds of one parked call share a counter, so it keeps going up from round to round.
    """

    def __init__(self, ctx: Context, ticks: Iterator[int] | None = None) -> None:
        self._ctx = ctx
        self._ticks = ticks if ticks is not None else itertools.count(1)
        self._open = True

    async def __call__(self, event: ev.Event) -> None:
        if self._open and (message := progress_message(event)) is not None:
            await self._ctx.report_progress(next(self._ticks), None, message)

    def close(self) -> None:
        self._open = False


def progress_message(event: ev.Event) -> str | None:
    """What a progress notification, or a task's status message, says of `event` (its unsafe characters made
    visible, as on every replica); None: nothing."""
    if isinstance(event, ev.RunFinished) and event.result.stop_reason == "cancelled":
        return None  # the caller cancelled: it is not listening, and there will be no result
    return progress_line(event)
