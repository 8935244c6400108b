"""Who sees the apps: hosts that declare the MCP Apps extension `io.modelcontextprotocol/ui` (`shows_apps`), and only
they. A server middleware leaves the views, the tool selector's opener, the app-only tools and the run view's
`_meta.ui` out of what any other request lists; calling an app tool without the extension is calling a tool that does
not exist (front/server.py refuses it as such).

The extension is declared per request on 2026-07-28 and per session on 2025-11-25, in the client's capabilities under
`extensions` (or, by hosts written before extensions had their own field, under `experimental`); settings that list
MIME types must list `text/html;profile=mcp-app`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from mcp.server.apps import APP_MIME_TYPE, EXTENSION_ID
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context

RUN_VIEW = "ui://meta-agent/run"
TOOLS_VIEW = "ui://meta-agent/tools"
APP_ONLY = ("app_run", "app_answer", "app_toolbox", "app_set_tool", "app_set_mode", "app_start", "app_runs")
OPENER = "tools"  # the tool that opens the tool selector: model-visible, callable with {}
UI_TOOLS = frozenset({*APP_ONLY, OPENER})


def shows_apps(ctx: Context[Any] | ServerRequestContext[Any, Any]) -> bool:
    """Whether the caller of `ctx` declared the MCP Apps extension (with our MIME type, where it lists any)."""
    capabilities = ctx.client_capabilities if isinstance(ctx, Context) else ctx.session.client_capabilities
    if capabilities is None:
        return False
    declared = (capabilities.extensions or {}).get(EXTENSION_ID)
    if declared is None:
        declared = (capabilities.experimental or {}).get(EXTENSION_ID)
    if not isinstance(declared, Mapping):
        return False
    mime_types = declared.get("mimeTypes")
    return mime_types is None or (isinstance(mime_types, list | tuple) and APP_MIME_TYPE in mime_types)


async def apps_for_ui_hosts(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    if ctx.method not in ("tools/list", "resources/list") or shows_apps(ctx):
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
