"""Internal tools, the children's tools and the webhooks of servers.json (`webhooks.NAME`) in one registry.

Every tool has an MCP-facing name (`server.tool` for a child's tool, the bare name for an internal one) and a
model-facing alias in `[A-Za-z0-9_-]{1,64}`, which is what LLM APIs accept. The alias of a name never depends on
the other tools: `server__tool` where that is unambiguous, else a readable prefix and a hash of the full name.
Tools whose names or aliases would clash are reported in `Toolbox.problems`, never silently dropped. Tools known
but not offered (`withheld_child_tools`, `withheld_webhooks`) are described for a host's tool selector, never callable.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import mcp.types as t

from meta_agent.children.questions import Questions
from meta_agent.children.results import outcome_of
from meta_agent.children.supervisor import ChildServer
from meta_agent.children.webhooks import Webhooks
from meta_agent.config.servers import check_glob
from meta_agent.core.messages import TextPart
from meta_agent.core.policy import TrustLevel, stricter, trust_level, visible
from meta_agent.core.result import Mode
from meta_agent.core.tools import (
    FOLLOW_UP_TOOLS,
    NO_RUN,
    InternalTool,
    ProgressFn,
    RunContext,
    ToolHints,
    ToolOutcome,
    ToolSpec,
)
from meta_agent.errors import ChildUnavailable, PatternError
from meta_agent.records.metrics import child_call
from meta_agent.shared.text import one_line
from meta_agent.store.trustfile import Recorded, definition_hash

ALIAS = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_ALIAS = 64
_HASH_LENGTH = 8
_PLAIN_TOOL = re.compile(r"[A-Za-z0-9_-]+")
_SEPARATOR = "__"


def alias_for(name: str) -> str:
    """The model-facing alias of an MCP-facing name; the same name always gets the same alias.

    `server.tool` becomes `server__tool` when that can be read back unambiguously (the server name has no `__`
    and does not end in `_`, the tool name needs no change, the whole fits in 64). Otherwise the alias is a
    sanitised prefix, `_`, and 8 hex digits of the name's SHA-256.
    """
    server, dot, tool = name.partition(".")
    if not dot:
        plain = name if _PLAIN_TOOL.fullmatch(name) and _SEPARATOR not in name else None
    elif _SEPARATOR not in server and not server.endswith("_") and _PLAIN_TOOL.fullmatch(tool):
        plain = f"{server}{_SEPARATOR}{tool}"
    else:
        plain = None
    if plain is not None and len(plain) <= MAX_ALIAS:
        return plain
    readable = re.sub(r"[^A-Za-z0-9_-]", "_", name.replace(".", _SEPARATOR, 1))
    digest = hashlib.sha256(name.encode()).hexdigest()[:_HASH_LENGTH]
    return f"{readable[: MAX_ALIAS - _HASH_LENGTH - 1]}_{digest}"


@dataclass(frozen=True)
class Levels:
    """The levels recorded with `meta-agent trust`, by tool name; `stale`: the trust file cannot be read now, and
    these are what it said when it last could."""

    by_name: Mapping[str, Recorded]
    stale: bool = False


@dataclass(frozen=True)
class Toolbox:
    """An immutable snapshot of every enabled tool; build a new one when a child changes."""

    tools: tuple[ToolSpec, ...] = ()
    problems: tuple[str, ...] = ()
    by_name: Mapping[str, ToolSpec] = field(default_factory=dict)
    by_alias: Mapping[str, ToolSpec] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        internal: Sequence[InternalTool],
        children: Iterable[ChildServer],
        recorded: Mapping[str, Recorded] | None = None,
        *,
        trust_problem: str | None = None,
        webhooks: Webhooks | None = None,
    ) -> Toolbox:
        """The toolbox of `internal` tools, the ready children's tools and the enabled `webhooks`; `recorded` are
        levels from the trust file. With a `trust_problem` (the file cannot be read now), `recorded` are the levels
        last read: they may lower a tool's trust, never raise it, and the problem heads the toolbox's problems."""
        levels = Levels(recorded or {}, stale=trust_problem is not None)
        specs = [_internal_spec(tool, levels) for tool in internal]
        for child in children:
            specs.extend(_child_spec(child.name, tool, child.entry.trust, levels) for tool in child.tools)
        if webhooks is not None:
            specs.extend(_child_spec(webhooks.name, tool, webhooks.trust, levels) for tool in webhooks.tools)
        toolbox = cls.of(specs)
        if trust_problem is None:
            return toolbox
        return replace(toolbox, problems=(trust_problem, *toolbox.problems))

    @classmethod
    def of(cls, specs: Iterable[ToolSpec]) -> Toolbox:
        """A toolbox of `specs` in order; a spec whose name or alias is taken is left out and reported."""
        kept: list[ToolSpec] = []
        problems: list[str] = []
        by_name: dict[str, ToolSpec] = {}
        by_alias: dict[str, ToolSpec] = {}
        for spec in specs:
            if spec.name in by_name:
                problems.append(f"{spec.name}: listed twice by its server; the second one is left out")
            elif spec.alias in by_alias:
                other = by_alias[spec.alias].name
                problems.append(f"{spec.name}: model-facing name {spec.alias!r} is taken by {other}; left out")
            else:
                kept.append(spec)
                by_name[spec.name] = spec
                by_alias[spec.alias] = spec
        return cls(tuple(kept), tuple(problems), by_name, by_alias)

    def select(self, patterns: Sequence[str] | None = None, *, mode: Mode = "agent") -> list[ToolSpec]:
        """The tools `mode` shows whose names match any of `patterns` (every one when `patterns` is None).

        Raises:
            PatternError: a pattern that is not a glob over tool names.
        """
        for pattern in patterns or ():
            try:
                check_glob(pattern)
            except ValueError as exc:
                raise PatternError(f"tools: {exc}") from None
        return [
            spec
            for spec in self.tools
            if visible(mode, internal=spec.internal, read_only=spec.hints.read_only)
            and not (mode == "ask" and spec.name in FOLLOW_UP_TOOLS)
            and (patterns is None or any(fnmatch.fnmatchcase(spec.name, p) for p in patterns))
        ]


def withheld_child_tools(
    children: Iterable[ChildServer],
    recorded: Mapping[str, Recorded] | None = None,
    *,
    trust_problem: str | None = None,
) -> list[tuple[ToolSpec, str]]:
    """The children's tools that are known but not offered, each with why in one line: those `tools.allow` /
    `tools.deny` filter out, and every tool a child that is down listed while it was last ready (a child that never
    was ready, or is disabled, has none). They are described, with trust as `Toolbox.build` would give it, and never
    called: no toolbox holds them."""
    levels = Levels(recorded or {}, stale=trust_problem is not None)
    withheld: list[tuple[ToolSpec, str]] = []
    for child in children:
        status = child.status
        seen_here: set[str] = set()  # a tool listed twice is described once (the toolbox reports the repeat)
        down = None if status.state == "ready" else _down_why(status.name, status.state, status.error)
        for tool in child.listed:
            why = child.why_not_offered(tool.name) or down
            if why is None or tool.name in seen_here:
                continue
            seen_here.add(tool.name)
            withheld.append((_child_spec(child.name, tool, child.entry.trust, levels), why))
    return withheld


def withheld_webhooks(
    webhooks: Webhooks, recorded: Mapping[str, Recorded] | None = None, *, trust_problem: str | None = None
) -> list[tuple[ToolSpec, str]]:
    """The disabled webhooks, described as `Toolbox.build` would list them, each with why; never called."""
    levels = Levels(recorded or {}, stale=trust_problem is not None)
    return [
        (_child_spec(webhooks.name, tool, webhooks.trust, levels), "disabled in servers.json")
        for tool in webhooks.disabled
    ]


def pinned(children: Iterable[ChildServer], tools: Iterable[ToolSpec]) -> set[str]:
    """The names of `tools` that their server's `pin` globs (servers.json, over its own tool names) match: with tool
    search on, they stay in the model's schema."""
    pins = {child.name: child.entry.pin for child in children}
    return {
        spec.name
        for spec in tools
        if spec.server in pins and any(fnmatch.fnmatchcase(spec.tool, pattern) for pattern in pins[spec.server])
    }


def _down_why(server: str, state: str, error: str | None) -> str:
    return f"server {server!r} is {state}" + (f": {one_line(error)}" if error else "")


def may_name_server(pattern: str, server: str) -> bool:
    """Whether `pattern` can match some tool of `server` (a name `server.<tool>`), whatever tools it turns out to have.

    The glob is run as a small automaton over the prefix `server.`: if any way through it is still open at the end,
    some tool name completes the match.
    """
    tokens = _glob_tokens(pattern)
    states = _past_stars({0}, tokens)
    for char in f"{server}.":
        moved = {i if tokens[i] == "*" else i + 1 for i in states if i < len(tokens) and _takes(tokens[i], char)}
        states = _past_stars(moved, tokens)
    return any(i < len(tokens) for i in states)  # a tool's own name is never empty


def _glob_tokens(pattern: str) -> list[str]:
    """`pattern` as fnmatch reads it: `*`, `?`, a `[...]` class, or one literal character each."""
    tokens: list[str] = []
    i = 0
    while i < len(pattern):
        end = i + 1
        if pattern[i] == "[":
            j = i + 1 + (pattern[i + 1 : i + 2] == "!")
            j += pattern[j : j + 1] == "]"
            close = pattern.find("]", j)
            end = close + 1 if close != -1 else end
        tokens.append(pattern[i:end])
        i = end
    return tokens


def _takes(token: str, char: str) -> bool:
    return token == "*" or fnmatch.fnmatchcase(char, token)


def _past_stars(states: set[int], tokens: list[str]) -> set[int]:
    """`states` and every state reached from them by letting a `*` match nothing."""
    reached = set(states)
    for i in sorted(states):
        while i < len(tokens) and tokens[i] == "*":
            i += 1
            reached.add(i)
    return reached


def definition_of(spec: ToolSpec) -> str:
    """The hash `meta-agent trust` binds a recorded level to."""
    return definition_hash(spec.description, spec.input_schema, spec.hints.as_annotations())


def _level(
    name: str,
    tool: str,
    description: str,
    input_schema: Mapping[str, Any],
    hints: ToolHints,
    *,
    trust: Mapping[str, TrustLevel],
    recorded: Levels,
) -> tuple[TrustLevel, str]:
    """A level recorded by `meta-agent trust` for this very definition, else the server's `trust`, else default."""
    entry = recorded.by_name.get(name)
    if (
        entry is not None
        and not recorded.stale
        and entry.definition == definition_hash(description, input_schema, hints.as_annotations())
    ):
        return entry.level, f"meta-agent trust, {entry.recorded}"
    level, source = trust_level(tool, read_only=hints.read_only, trust=trust)
    if entry is None:
        return level, source
    if recorded.stale:  # fail closed: while the trust file cannot be read, what it said may only restrict
        if stricter(entry.level, level) != level:
            return entry.level, f"meta-agent trust {entry.level!r} as last read; the trust file cannot be read now"
        return level, f"{source}; the {entry.level!r} recorded for it does not apply: the trust file cannot be read"
    # The tool changed since its level was recorded: it gains nothing from that, nor from its new annotations.
    if entry.level == "never":
        return "never", "meta-agent trust 'never', kept though the tool changed since"
    capped: TrustLevel = "ask" if level == "always" else level
    return capped, f"{source}, at most ask: the {entry.level!r} recorded for it was dropped as the tool changed since"


def _internal_spec(tool: InternalTool, recorded: Levels) -> ToolSpec:
    level, source = _level(
        tool.name, tool.name, tool.description, tool.input_schema, tool.hints, trust={}, recorded=recorded
    )
    return ToolSpec(
        name=tool.name,
        alias=alias_for(tool.name),
        server=None,
        tool=tool.name,
        description=tool.description,
        input_schema=tool.input_schema,
        output_schema=None,
        hints=tool.hints,
        trust=level,
        trust_source=source,
    )


def _child_spec(server: str, tool: t.Tool, trust: Mapping[str, TrustLevel], recorded: Levels) -> ToolSpec:
    notes = tool.annotations
    hints = ToolHints(
        title=tool.title or (notes.title if notes else None),
        read_only_hint=notes.read_only_hint if notes else None,
        destructive_hint=notes.destructive_hint if notes else None,
        idempotent_hint=notes.idempotent_hint if notes else None,
        open_world_hint=notes.open_world_hint if notes else None,
    )
    name = f"{server}.{tool.name}"
    level, source = _level(
        name, tool.name, tool.description or "", tool.input_schema, hints, trust=trust, recorded=recorded
    )
    return ToolSpec(
        name=name,
        alias=alias_for(name),
        server=server,
        tool=tool.name,
        description=tool.description or "",
        input_schema=tool.input_schema,
        output_schema=tool.output_schema,
        hints=hints,
        trust=level,
        trust_source=source,
    )


class ToolCaller:
    """Runs a toolbox tool: an internal one in-process, a child's through its connection, a webhook's as an HTTP
    request (`children` has the webhooks under their server name, children.pool.ChildPool.children)."""

    def __init__(
        self,
        children: Mapping[str, ChildServer | Webhooks],
        internal: Sequence[InternalTool],
        questions: Questions | None = None,
    ) -> None:
        self._children = children
        self._internal = {tool.name: tool for tool in internal}
        self._questions = questions  # answers children that ask during a call; None declines them

    async def call(
        self,
        spec: ToolSpec,
        arguments: Mapping[str, Any],
        on_progress: ProgressFn | None = None,
        *,
        context: RunContext = NO_RUN,
    ) -> ToolOutcome:
        """Run the call; an internal tool gets the calling run's `context`.

        Raises:
            ChildError: the child could not complete the call.
        """
        if spec.server is None:
            run = self._internal[spec.name].run
            if run is None:
                return ToolOutcome(parts=(TextPart(text=f"{spec.name} is not available"),), is_error=True)
            return await run(arguments, context)
        child = self._children.get(spec.server)
        if child is None:  # a reload removed it while the run went on with the tools it started with
            raise ChildUnavailable(spec.server, "the server was removed from the configuration")
        with child_call(spec.server, spec.tool) as measured:  # mcp.client.operation.duration
            called = child.call(spec.tool, arguments, on_progress=on_progress, questions=self._questions)
            result = measured(await called)
        return outcome_of(result)
