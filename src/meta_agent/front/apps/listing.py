"""Hosts without MCP Apps see today's server: a server middleware that leaves the views, the tool selector's opener,
the app-only tools and the run view's `_meta.ui` out of what a request that does not declare the extension
`io.modelcontextprotocol/ui` (with the MIME type `text/html;profile=mcp-app`) lists. Calling an app tool without it is
calling a tool that does not exist (front/server.py refuses it as such).

The extension is declared per request on 2026-07-28 and per session on 2025-11-25; the SDK's `client_supports_apps`
reads either.
"""

from __future__ import annotations

from typing import Any, cast

from mcp.server.apps import client_supports_apps
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext

from meta_agent.front.apps.tools import UI_TOOLS


async def apps_for_ui_hosts(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    if ctx.method not in ("tools/list", "resources/list") or client_supports_apps(ctx):
        return await call_next(ctx)
    result = cast(dict[str, Any], await call_next(ctx))
    if ctx.method == "resources/list":
        result["resources"] = [
            item for item in result.get("resources", []) if not str(item.get("uri", "")).startswith("ui://")
        ]
        return result
    tools = [tool for tool in result.get("tools", []) if tool.get("name") not in UI_TOOLS]
    for tool in tools:
        meta = tool.get("_meta")
        if isinstance(meta, dict) and "ui" in meta:
            meta.pop("ui")
            if not meta:
                tool.pop("_meta")
    result["tools"] = tools
    return result
