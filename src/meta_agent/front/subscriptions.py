"""Hosts that hear when the toolbox resource changes (README, MCP tools: a child starts, dies or changes its tools, the
trust file or servers.json changes), in the way each protocol era has:

- 2025-11-25: a session's `resources/subscribe` to meta-agent://toolbox; each change is a
  `notifications/resources/updated` on that session's own channel (stdio: the pipe; HTTP: the session's GET
  stream), until `resources/unsubscribe` or the end of the session.
- 2026-07-28: a `subscriptions/listen` stream that names the toolbox among its resource subscriptions. The SDK
  serves the stream; we publish to the bus it reads (`bus`, handed to the server when it is made).

Any of our resources may be subscribed to (a URI that names none is refused, -32602, as reading it is; a listen stream
may name any URI), but only the toolbox changes: a run's resource is written once, when it ends. A change is a nudge,
not a diff: the host reads the resource again. Changes that come in a burst (children starting together) are sent as
few notifications, never lost: one that comes while others are sent is sent after them.
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import mcp.types as t
import structlog
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import MCPServer
from mcp.server.subscriptions import InMemorySubscriptionBus, ResourceUpdated
from mcp.shared.uri_template import UriTemplate

from meta_agent.front.approvals.asking import connection_of
from meta_agent.front.call_guard import unknown

log = structlog.get_logger(__name__)

# How long one session may take to accept a notification: one that does not (an HTTP session whose GET stream
# nobody reads) must not hold up the others.
SEND_TIMEOUT = 5.0


class ToolboxSubscribers:
    """Who hears of toolbox changes, and the task (`deliver`) that tells them."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.bus = InMemorySubscriptionBus()  # 2026-07-28 listen streams
        self._sessions: weakref.WeakSet[Connection] = weakref.WeakSet()  # 2025-11-25 sessions, gone with them
        self._changed = anyio.Event()

    def install(self, server: Server[Any], known: Callable[[str], Awaitable[bool]]) -> None:
        """Serve `resources/subscribe` and `resources/unsubscribe` (which declares `resources.subscribe` to
        2025-11-25 sessions; the listen stream declares it to 2026-07-28 callers), for the URIs `known` says are
        resources."""
        self._known = known
        server.add_request_handler("resources/subscribe", t.SubscribeRequestParams, self._subscribe)
        server.add_request_handler("resources/unsubscribe", t.UnsubscribeRequestParams, self._unsubscribe)

    def changed(self) -> None:
        """The toolbox changed (called on the event loop, by the engine)."""
        self._changed.set()

    async def deliver(self) -> None:
        """Tell every subscriber of each change, until cancelled."""
        while True:
            await self._changed.wait()
            self._changed = anyio.Event()
            for connection in list(self._sessions):
                with anyio.move_on_after(SEND_TIMEOUT) as waited:
                    try:
                        await connection.send_resource_updated(self.uri)
                        continue
                    except Exception as exc:  # a session that is gone: whatever its transport raised
                        log.debug("subscriber_gone", error=f"{type(exc).__name__}: {exc}")
                if waited.cancelled_caught:
                    log.info("subscriber_slow", waited_s=SEND_TIMEOUT)
                self._sessions.discard(connection)
            await self.bus.publish(ResourceUpdated(uri=self.uri))

    async def _subscribe(self, ctx: ServerRequestContext[Any, Any], params: t.SubscribeRequestParams) -> t.EmptyResult:
        await self._check(params.uri)
        if params.uri == self.uri:
            self._sessions.add(connection_of(ctx.session))
        return t.EmptyResult()

    async def _unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: t.UnsubscribeRequestParams
    ) -> t.EmptyResult:
        await self._check(params.uri)
        if params.uri == self.uri:
            self._sessions.discard(connection_of(ctx.session))
        return t.EmptyResult()

    async def _check(self, uri: str) -> None:
        if not await self._known(uri):
            raise unknown("resource", uri)


async def names_resource(server: MCPServer[Any], uri: str) -> bool:
    """Whether `uri` is one of `server`'s resources, or of its resource templates (a run's, whatever its id)."""
    if any(str(resource.uri) == uri for resource in await server.list_resources()):
        return True
    templates = await server.list_resource_templates()
    return any(UriTemplate.parse(template.uri_template).match(uri) is not None for template in templates)
