"""Which tools a mode shows, and each tool's trust level (README, Trust and approval). Pure functions, no I/O.

Trust levels: `never` (blocked), `ask` (the user is asked), `always`. A tool's level is the `trust` entry of its
server that matches it most specifically, else the default from its annotations: read-only tools are `always`,
everything else is `ask`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Literal

from meta_agent.core.result import Mode

TrustLevel = Literal["never", "ask", "always"]
Decision = Literal["run", "ask", "deny"]

_WILDCARDS = frozenset("*?[]!")
_STRICTNESS: dict[TrustLevel, int] = {"never": 0, "ask": 1, "always": 2}


def visible(mode: Mode, *, internal: bool, read_only: bool) -> bool:
    """Whether the model sees a tool in `mode`: ask shows internal tools, plan read-only ones, agent all."""
    if mode == "ask":
        return internal
    if mode == "plan":
        return read_only
    return True


def default_trust(*, read_only: bool) -> tuple[TrustLevel, str]:
    """The level a tool has from its annotations alone, and why."""
    return ("always", "read-only") if read_only else ("ask", "not read-only")


def trust_level(tool: str, *, read_only: bool, trust: Mapping[str, TrustLevel]) -> tuple[TrustLevel, str]:
    """A tool's level and where it came from: its server's most specific matching `trust` pattern, else the default.

    `tool` is the server's own tool name, as the patterns of its `trust` map are written. The most specific
    pattern is an exact name, else the one with the most literal characters; ties go to the first written.
    """
    matching = [pattern for pattern in trust if fnmatch.fnmatchcase(tool, pattern)]
    if not matching:
        return default_trust(read_only=read_only)
    best = max(matching, key=_specificity)  # max keeps the first of equals
    return trust[best], f"trust {best!r}"


def stricter(first: TrustLevel, second: TrustLevel) -> TrustLevel:
    """The level that lets less run: `never` before `ask` before `always`."""
    return first if _STRICTNESS[first] <= _STRICTNESS[second] else second


def _specificity(pattern: str) -> tuple[bool, int]:
    literal = sum(1 for char in pattern if char not in _WILDCARDS)
    return (literal == len(pattern), literal)


def decide(mode: Mode, level: TrustLevel) -> Decision:
    """What happens when the model calls a tool of `level` in `mode`.

    `never` is refused everywhere; `always` runs; `ask` asks the user, except in ask mode, where the only tools are
    internal ones and nothing is asked.
    """
    if level == "never":
        return "deny"
    if level == "always" or mode == "ask":
        return "run"
    return "ask"
