"""The neutral core sees no MCP and no vendor SDK (README, Layout): each of its modules, imported alone in a fresh
interpreter, loads none of them."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import pytest

import meta_agent.core

# Every module of the core folder, found on disk so a new one cannot be forgotten, and the helpers it may use.
CORE = (
    *sorted(f"meta_agent.core.{info.name}" for info in pkgutil.iter_modules(meta_agent.core.__path__)),
    "meta_agent.shared.text",
    "meta_agent.errors",
    "meta_agent.config.servers",
    "meta_agent.config.settings",
)
EDGES = ("mcp", "openai", "anthropic")


@pytest.mark.parametrize("module", CORE)
def test_the_core_imports_no_mcp_and_no_vendor_sdk(module: str) -> None:
    probe = f"import sys, json, {module}; print(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(
        subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    )
    seen = [name for name in loaded if name.split(".")[0] in EDGES]
    assert not seen, f"{module} loads {seen[:5]}"
