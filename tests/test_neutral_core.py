"""The neutral core sees no MCP and no vendor SDK (design.md §1): each of its modules, imported alone in a fresh
interpreter, loads none of them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CORE = (
    "meta_agent.loop",
    "meta_agent.calls",
    "meta_agent.messages",
    "meta_agent.events",
    "meta_agent.tools",
    "meta_agent.limits",
    "meta_agent.policy",
    "meta_agent.text",
)
EDGES = ("mcp", "openai", "anthropic")


@pytest.mark.parametrize("module", CORE)
def test_the_core_imports_no_mcp_and_no_vendor_sdk(module: str) -> None:
    probe = f"import sys, json, {module}; print(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout)
    seen = [name for name in loaded if name.split(".")[0] in EDGES]
    assert not seen, f"{module} loads {seen[:5]}"
