"""Hearing a 2026-07-28 child's tool changes: that era sends `notifications/tools/list_changed` only on a
`subscriptions/listen` stream, which the child's supervisor keeps open for as long as the connection lasts (a
2025-11-25 child sends it on the connection itself, which connect.py's hooks hear)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import structlog
from anyio.abc import TaskStatus
from mcp import Client
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from meta_agent.children.failures import describe_exception

log = structlog.get_logger(__name__)

# A 2026-07-28 child's listen stream that drops is opened again after this (its tools are listed again then).
RELISTEN_AFTER = 1.0


@asynccontextmanager
async def hearing_tool_changes(
    name: str, client: Client, lost: anyio.Event, changed: Callable[[], None]
) -> AsyncIterator[None]:
    """While inside, a 2026-07-28 child's tool changes are heard (`changed` is called): its listen stream is open
    (acknowledged) before its tools are first listed, so no change can fall between the two. `lost` is set once the
    connection is over; `name` is the child's, for the log."""
    if not _hears_tool_changes(client):
        yield
        return
    async with anyio.create_task_group() as tg:
        await tg.start(_listen, name, client, lost, changed)
        try:
            yield
        finally:
            tg.cancel_scope.cancel()


async def _listen(
    name: str,
    client: Client,
    lost: anyio.Event,
    changed: Callable[[], None],
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """The child's `subscriptions/listen` stream of tool changes, for as long as the connection lasts; started once
    the first stream is acknowledged (or cannot be had). The stream has no replay: one that drops is opened again,
    and the tools are listed again (`changed`), as a change may have been missed meanwhile."""
    started = False
    while not lost.is_set():
        try:
            async with client.listen(tools_list_changed=True) as changes:
                if started:
                    changed()
                else:
                    task_status.started()
                    started = True
                async for _ in changes:
                    changed()
            break  # the child ended the stream on purpose: it will send no more
        except SubscriptionLost:
            await anyio.sleep(RELISTEN_AFTER)
        except (ListenNotSupportedError, MCPError, TimeoutError) as exc:
            log.info("child_changes_unheard", server=name, error=describe_exception(exc))
            break
    if not started:
        task_status.started()


def _hears_tool_changes(client: Client) -> bool:
    """Whether the child speaks 2026-07-28 and says its tools can change: only then is there a stream to listen to
    (a 2025-11-25 child's notifications come on the connection itself)."""
    tools = client.server_capabilities.tools if client.server_capabilities else None
    return bool(tools and tools.list_changed) and client.protocol_version in MODERN_PROTOCOL_VERSIONS
