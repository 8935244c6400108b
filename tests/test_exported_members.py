"""The embedding API: `from meta_agent import ...` gives exactly the public names, each from its own module, loaded
only when asked for; and the README's embedding example runs as written."""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TESTS

import meta_agent
import meta_agent.errors

ROOT = TESTS.parent
EDGES = ("mcp", "openai", "anthropic")

# Adding or removing a public name is a deliberate change of this list.
EXPECTED = [
    "__version__",
    "ApprovalAnswered",
    "ApprovalRequested",
    "Approver",
    "AssistantMessage",
    "build_server",
    "ChildDied",
    "ChildError",
    "ChildProgress",
    "ChildProtocolError",
    "ChildTimeout",
    "ChildUnavailable",
    "ConfigError",
    "configure_logging",
    "ConversationLost",
    "Emit",
    "Engine",
    "Event",
    "Heartbeat",
    "http_app",
    "ImageGenError",
    "ImagePart",
    "LimitExceeded",
    "LimitReached",
    "load_servers",
    "load_settings",
    "make_provider",
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
    "resolve_provider",
    "RunFailed",
    "RunFinished",
    "RunResult",
    "RunStarted",
    "RunUsage",
    "ScriptedProvider",
    "ScriptError",
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
]
# Type aliases (a Literal, a union, a Callable) carry no module of their own; every other name is a class or function.
ALIASES = {"Emit", "Event", "Message", "Mode", "Part", "StopReason", "TrustLevel"}


def test_all_is_the_expected_list() -> None:
    # Its order is ruff's (RUF022, in scripts/lint); what is in it is this test's.
    assert sorted(meta_agent.__all__) == sorted(EXPECTED)
    assert len(set(meta_agent.__all__)) == len(meta_agent.__all__)


def test_every_public_name_resolves_and_is_listed_by_dir() -> None:
    for name in meta_agent.__all__:
        assert getattr(meta_agent, name) is not None, name
    assert set(meta_agent.__all__) <= set(dir(meta_agent))


def test_an_unknown_name_is_an_attribute_error() -> None:
    for name in ("Toolbox", "Enginee"):  # an internal, a misspelling
        with pytest.raises(AttributeError, match=f"no attribute '{name}'"):
            getattr(meta_agent, name)


def test_each_name_is_the_object_its_module_defines() -> None:
    # The real module is kept as __module__ (httpx rewrites it to "httpx"): our modules are not private, README's
    # layout names them, and rewriting would mean importing them all up front, which the laziness exists to avoid.
    for name in meta_agent.__all__:
        value = getattr(meta_agent, name)
        if name == "__version__":
            assert isinstance(value, str)
        elif name in ALIASES:
            assert not inspect.isclass(value) and not inspect.isfunction(value), name
        else:
            assert value.__module__.startswith("meta_agent."), (name, value.__module__)
            assert value.__name__ == name


def test_every_error_of_the_tree_is_exported() -> None:
    errors = {
        name
        for name, value in vars(meta_agent.errors).items()
        if inspect.isclass(value) and issubclass(value, meta_agent.errors.MetaAgentError)
    }
    assert errors <= set(meta_agent.__all__)


def test_what_type_checkers_see_matches_what_is_loaded() -> None:
    # The `if TYPE_CHECKING:` imports and the lazy table name the same names from the same modules.
    tree = ast.parse(Path(meta_agent.__file__).read_text())
    seen: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom) and statement.module is not None
                seen.update({alias.name: statement.module for alias in statement.names})
    assert seen == meta_agent._MODULE_OF
    assert set(seen) == set(meta_agent.__all__) - {"__version__"}


def _fresh(code: str) -> list[str]:
    """The modules a fresh interpreter holds after running `code`."""
    probe = f"{code}\nimport sys, json; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout.splitlines()[-1])
    return loaded


def test_importing_the_package_loads_nothing_of_ours_and_no_edge() -> None:
    loaded = _fresh("import meta_agent; assert meta_agent.__version__")
    assert [name for name in loaded if name.startswith("meta_agent")] == ["meta_agent", "meta_agent.version"]
    assert not [name for name in loaded if name.split(".")[0] in EDGES]


def test_the_neutral_types_import_without_mcp_or_a_vendor_sdk() -> None:
    loaded = _fresh("from meta_agent import ModelRequest, ModelResponse, RunResult, ScriptedProvider, Event")
    assert not [name for name in loaded if name.split(".")[0] in EDGES]


def test_the_engine_imports_from_the_package_root() -> None:
    loaded = _fresh("from meta_agent import Engine, build_server; assert Engine.__name__ == 'Engine'")
    assert "meta_agent.engine" in loaded and "meta_agent.front.server" in loaded


def test_the_readme_embedding_example_runs(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Embedding\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, "the Embedding section has one python example"
    # Its traces and conversations go to a home of its own; no META_AGENT_* setting of ours leaks in.
    environ = {key: value for key, value in os.environ.items() if not key.startswith(("META_AGENT_", "XDG_"))}
    environ["HOME"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", blocks[0]], cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "final Hello from meta-agent.\n"
    assert list((tmp_path / ".local" / "state" / "meta-agent" / "traces").iterdir()), "the run left no trace"
