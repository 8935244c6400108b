"""meta-agent: an MCP server that is itself an agent.

What a Python program embeds is importable from here, and only from here: the engine and the MCP server around it,
the provider protocol with its test double, the neutral transcript a custom provider speaks, the run's result and
events, the settings and the errors (README.md, "Embedding"; tests/test_exported_members.py guards the list).

Every import of a submodule, the command line's included, runs this file first, so it imports nothing: each name
loads its module on first use (PEP 562). Importing the neutral types does not load MCP or a vendor SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from meta_agent.version import __version__

if TYPE_CHECKING:  # what type checkers and editors see; at run time, __getattr__ below
    from meta_agent.config.servers import ServerEntry, load_servers
    from meta_agent.config.settings import Settings, load_settings
    from meta_agent.core.events import (
        ApprovalAnswered,
        ApprovalRequested,
        ChildProgress,
        Emit,
        Event,
        Heartbeat,
        LimitReached,
        ModelRequested,
        ModelResponded,
        ModelTurnStarted,
        RunFailed,
        RunFinished,
        RunStarted,
        Thinking,
        ToolCallFinished,
        ToolCallStarted,
    )
    from meta_agent.core.messages import (
        AssistantMessage,
        ImagePart,
        Message,
        ModelRequest,
        ModelResponse,
        Part,
        SystemMessage,
        TextPart,
        ThinkingPart,
        ToolCall,
        ToolMessage,
        ToolResult,
        ToolSchema,
        Usage,
        UserMessage,
    )
    from meta_agent.core.policy import TrustLevel
    from meta_agent.core.provider import Provider
    from meta_agent.core.result import Mode, RunResult, RunUsage, StepRecord, StopReason, ToolCallRecord
    from meta_agent.core.tool_call import Approver, Verdict
    from meta_agent.core.tools import ToolHints, ToolSpec
    from meta_agent.engine import Engine
    from meta_agent.errors import (
        ChildDied,
        ChildError,
        ChildProtocolError,
        ChildTimeout,
        ChildUnavailable,
        ConfigError,
        ConversationLost,
        ImageGenError,
        LimitExceeded,
        MetaAgentError,
        ModelNotConfigured,
        PatternError,
        ProviderAuthError,
        ProviderBadRequest,
        ProviderError,
        ProviderRateLimited,
        ProviderUnavailable,
        ScriptError,
    )
    from meta_agent.front.http_app import http_app
    from meta_agent.front.server import MetaAgentServer, build_server
    from meta_agent.providers import make_provider, resolve_provider
    from meta_agent.providers.scripted import ScriptedProvider
    from meta_agent.records.logs import configure_logging

# A literal list (sorted as ruff's RUF022 wants), so type checkers read it; a change to it is a visible test change.
__all__ = [
    "ApprovalAnswered",
    "ApprovalRequested",
    "Approver",
    "AssistantMessage",
    "ChildDied",
    "ChildError",
    "ChildProgress",
    "ChildProtocolError",
    "ChildTimeout",
    "ChildUnavailable",
    "ConfigError",
    "ConversationLost",
    "Emit",
    "Engine",
    "Event",
    "Heartbeat",
    "ImageGenError",
    "ImagePart",
    "LimitExceeded",
    "LimitReached",
    "Message",
    "MetaAgentError",
    "MetaAgentServer",
    "Mode",
    "ModelNotConfigured",
    "ModelRequest",
    "ModelRequested",
    "ModelResponded",
    "ModelResponse",
    "ModelTurnStarted",
    "Part",
    "PatternError",
    "Provider",
    "ProviderAuthError",
    "ProviderBadRequest",
    "ProviderError",
    "ProviderRateLimited",
    "ProviderUnavailable",
    "RunFailed",
    "RunFinished",
    "RunResult",
    "RunStarted",
    "RunUsage",
    "ScriptError",
    "ScriptedProvider",
    "ServerEntry",
    "Settings",
    "StepRecord",
    "StopReason",
    "SystemMessage",
    "TextPart",
    "Thinking",
    "ThinkingPart",
    "ToolCall",
    "ToolCallFinished",
    "ToolCallRecord",
    "ToolCallStarted",
    "ToolHints",
    "ToolMessage",
    "ToolResult",
    "ToolSchema",
    "ToolSpec",
    "TrustLevel",
    "Usage",
    "UserMessage",
    "Verdict",
    "__version__",
    "build_server",
    "configure_logging",
    "http_app",
    "load_servers",
    "load_settings",
    "make_provider",
    "resolve_provider",
]

# Where each public name lives: the import __getattr__ makes the first time the name is asked for.
_SOURCES = {
    "meta_agent.config.servers": ("ServerEntry", "load_servers"),
    "meta_agent.config.settings": ("Settings", "load_settings"),
    "meta_agent.core.events": (
        "ApprovalAnswered",
        "ApprovalRequested",
        "ChildProgress",
        "Emit",
        "Event",
        "Heartbeat",
        "LimitReached",
        "ModelRequested",
        "ModelResponded",
        "ModelTurnStarted",
        "RunFailed",
        "RunFinished",
        "RunStarted",
        "Thinking",
        "ToolCallFinished",
        "ToolCallStarted",
    ),
    "meta_agent.core.messages": (
        "AssistantMessage",
        "ImagePart",
        "Message",
        "ModelRequest",
        "ModelResponse",
        "Part",
        "SystemMessage",
        "TextPart",
        "ThinkingPart",
        "ToolCall",
        "ToolMessage",
        "ToolResult",
        "ToolSchema",
        "Usage",
        "UserMessage",
    ),
    "meta_agent.core.policy": ("TrustLevel",),
    "meta_agent.core.provider": ("Provider",),
    "meta_agent.core.result": ("Mode", "RunResult", "RunUsage", "StepRecord", "StopReason", "ToolCallRecord"),
    "meta_agent.core.tool_call": ("Approver", "Verdict"),
    "meta_agent.core.tools": ("ToolHints", "ToolSpec"),
    "meta_agent.engine": ("Engine",),
    "meta_agent.errors": (
        "ChildDied",
        "ChildError",
        "ChildProtocolError",
        "ChildTimeout",
        "ChildUnavailable",
        "ConfigError",
        "ConversationLost",
        "ImageGenError",
        "LimitExceeded",
        "MetaAgentError",
        "ModelNotConfigured",
        "PatternError",
        "ProviderAuthError",
        "ProviderBadRequest",
        "ProviderError",
        "ProviderRateLimited",
        "ProviderUnavailable",
        "ScriptError",
    ),
    "meta_agent.front.http_app": ("http_app",),
    "meta_agent.front.server": ("MetaAgentServer", "build_server"),
    "meta_agent.providers": ("make_provider", "resolve_provider"),
    "meta_agent.providers.scripted": ("ScriptedProvider",),
    "meta_agent.records.logs": ("configure_logging",),
}
_MODULE_OF = {name: module for module, names in _SOURCES.items() for name in names}

if not TYPE_CHECKING:  # hidden from type checkers, which would otherwise take any misspelt name for `Any`

    def __getattr__(name: str) -> Any:
        """A public name, imported from its module the first time it is asked for, then kept here."""
        module = _MODULE_OF.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
