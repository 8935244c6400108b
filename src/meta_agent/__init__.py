"""meta-agent: an MCP server that is itself an agent.

What a Python program embeds is importable from here, and only from here: the engine and the MCP server around it,
the provider protocol with its test double, the neutral transcript a custom provider speaks, the run's result and
events, the settings and the errors (README.md, "Embedding").

`__all__` is the one list of public names. Where each is defined is said once, by the `if TYPE_CHECKING:` imports
that type checkers and editors read; at run time the package reads those same imports back to know which module to
load (tests/repo/test_exported_members.py holds the two to the same names, and every member of `Event` to the list).

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
        ModelSwitched,
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
    from meta_agent.core.result import (
        Mode,
        RunResult,
        RunUsage,
        StepRecord,
        StopReason,
        ToolCallRecord,
        UnavailableServer,
    )
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
    from meta_agent.front.auth.resource_server import ResourceServer
    from meta_agent.front.http.app import http_app
    from meta_agent.front.server import MetaAgentServer, build_server
    from meta_agent.providers.factory import make_provider, resolve_provider
    from meta_agent.providers.scripted import ScriptedProvider
    from meta_agent.records.logs import configure_logging

# A literal list (sorted as ruff's RUF022 wants), so type checkers read it.
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
    "ModelSwitched",
    "ModelTurnStarted",
    "Part",
    "PatternError",
    "Provider",
    "ProviderAuthError",
    "ProviderBadRequest",
    "ProviderError",
    "ProviderRateLimited",
    "ProviderUnavailable",
    "ResourceServer",
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
    "UnavailableServer",
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

_homes: dict[str, str] = {}  # public name -> its module, read from the imports above on the first name asked for


def _read_homes() -> dict[str, str]:
    """Each public name's module, as the `if TYPE_CHECKING:` imports above say it (under a millisecond, once)."""
    import ast  # the engine and the command line load it anyway; the package itself imports nothing

    assert __spec__ is not None and __spec__.loader is not None
    source = __spec__.loader.get_source(__name__)  # type: ignore[attr-defined]  # a SourceLoader's method
    if source is None:
        raise ImportError(f"{__name__}: the package's source is needed to find its public names (installed without)")
    homes: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom) and statement.module is not None:
                    homes.update(dict.fromkeys((alias.name for alias in statement.names), statement.module))
    return homes


if not TYPE_CHECKING:  # hidden from type checkers, which would otherwise take any misspelt name for `Any`

    def __getattr__(name: str) -> Any:
        """A public name, imported from its module the first time it is asked for, then kept here."""
        if name not in __all__:  # `from meta_agent import shared` asks here before importing the submodule
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        if not _homes:
            _homes.update(_read_homes())
        value = getattr(importlib.import_module(_homes[name]), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
