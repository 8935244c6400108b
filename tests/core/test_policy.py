"""Policy tables: which tools each mode shows, each tool's trust level, and what a call of each level does."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import tool_spec

from meta_agent.core.policy import TrustLevel, decide, trust_level, visible
from meta_agent.core.tool_call import blocked
from meta_agent.core.tools import ToolSpec

pytestmark = pytest.mark.quick


@pytest.mark.parametrize(
    ("mode", "internal", "read_only", "shown"),
    [
        ("ask", True, True, True),
        ("ask", True, False, True),
        ("ask", False, True, False),
        ("ask", False, False, False),
        ("plan", True, True, True),
        ("plan", True, False, False),
        ("plan", False, True, True),
        ("plan", False, False, False),
        ("agent", True, True, True),
        ("agent", True, False, True),
        ("agent", False, True, True),
        ("agent", False, False, True),
    ],
)
def test_visible(mode: str, internal: bool, read_only: bool, shown: bool) -> None:
    assert visible(mode, internal=internal, read_only=read_only) is shown  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("tool", "read_only", "trust", "level", "source"),
    [
        ("get_time", True, {}, "always", "read-only"),
        ("drop_table", False, {}, "ask", "not read-only"),
        ("execute_sql", False, {"execute_sql": "ask", "*": "always"}, "ask", "trust 'execute_sql'"),
        ("list_tables", True, {"execute_sql": "ask", "*": "always"}, "always", "trust '*'"),
        # the exact name beats a glob, whatever the order in the file
        ("execute_sql", False, {"*": "always", "execute_sql": "never"}, "never", "trust 'execute_sql'"),
        # a longer glob beats a shorter one
        ("delete_row", False, {"*": "always", "delete_*": "never"}, "never", "trust 'delete_*'"),
        # a trust entry can lower a read-only tool's level
        ("read_secret", True, {"read_secret": "never"}, "never", "trust 'read_secret'"),
        # no entry matches: the default
        ("write_file", False, {"read_*": "always"}, "ask", "not read-only"),
        # equally specific patterns: the first written wins
        ("ab", False, {"a?": "never", "?b": "always"}, "never", "trust 'a?'"),
        ("ab", False, {"?b": "always", "a?": "never"}, "always", "trust '?b'"),
        # character classes count as wildcards
        ("rm", False, {"r[mn]": "never", "r*": "always"}, "never", "trust 'r[mn]'"),
    ],
)
def test_trust_level(tool: str, read_only: bool, trust: dict, level: str, source: str) -> None:
    assert trust_level(tool, read_only=read_only, trust=trust) == (level, source)


@pytest.mark.parametrize(
    ("mode", "level", "decision"),
    [
        ("agent", "never", "deny"),
        ("agent", "ask", "ask"),
        ("agent", "always", "run"),
        ("plan", "never", "deny"),
        ("plan", "ask", "ask"),
        ("plan", "always", "run"),
        ("ask", "never", "deny"),
        ("ask", "ask", "run"),
        ("ask", "always", "run"),
    ],
)
def test_decide(mode: str, level: str, decision: str) -> None:
    assert decide(mode, level) == decision  # type: ignore[arg-type]


def _spec(server: str | None, trust: TrustLevel, source: str) -> ToolSpec:
    return dataclasses.replace(
        tool_spec({"type": "object"}), server=server, name="h.t" if server else "t", trust=trust, trust_source=source
    )


@pytest.mark.parametrize(
    ("spec", "advice"),
    [
        (
            _spec("h", "never", "servers.json"),
            'a user can allow it with "trust": {"t": ...} of server "h" in servers.json',
        ),
        # the trust file's level wins over servers.json: editing servers.json would change nothing
        (
            _spec("h", "never", "meta-agent trust, 2026-11-27T19:49:38Z"),
            "a user can allow it with `meta-agent trust h.t ask`",
        ),
        (
            _spec(None, "never", "meta-agent trust, 2026-11-27T19:49:38Z"),
            "a user can allow it with `meta-agent trust t ask`",
        ),
        (
            _spec("h", "ask", "servers.json"),
            'set "always" in "trust": {"t": ...} of server "h" in servers.json or run `meta-agent trust h.t always`',
        ),
        (
            _spec("h", "ask", "meta-agent trust, 2026-11-27T19:49:38Z"),
            "to run it without asking, run `meta-agent trust h.t always`",
        ),
    ],
)
def test_a_blocked_tool_names_the_place_its_level_comes_from(spec: ToolSpec, advice: str) -> None:
    why = blocked(spec, "agent", approver=None)
    assert why is not None and why.endswith(advice), why
