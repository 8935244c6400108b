"""The neutral tool types: what the loop knows of a tool, of its result and of a call's progress. No MCP or vendor
types here (README, Layout): the MCP edges (toolbox/build.py, children/) translate to and from them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from meta_agent.core.messages import ImagePart, Part
from meta_agent.core.policy import TrustLevel
from meta_agent.core.provider import Provider
from meta_agent.core.result import ErrorKind

FIND_TOOLS = "find_tools"  # the internal tool the model searches with when tool search is on (internal/find_tools.py)
RUN_CODE = "run_code"  # the internal tool of code mode: a program over the run's tools (internal/run_code.py)
# Internal tools that read what an earlier call of the run left (a result kept whole): of no use to `ask`, whose one
# tool call is its answer, so ask mode never shows them.
FOLLOW_UP_TOOLS = frozenset({"read_result"})
# The `webhooks` map of servers.json, and the server part of each webhook's tool name (`webhooks.notify`).
WEBHOOKS = "webhooks"


class ProgressFn(Protocol):
    """A tool's own progress during a call, as MCP reports it (the SDK's progress callback has this shape)."""

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None: ...


@dataclass(frozen=True, kw_only=True)
class ToolHints:
    """A tool's MCP annotations as given (None: not given); the properties apply the spec's defaults."""

    title: str | None = None
    read_only_hint: bool | None = None
    destructive_hint: bool | None = None
    idempotent_hint: bool | None = None
    open_world_hint: bool | None = None

    @property
    def read_only(self) -> bool:
        return self.read_only_hint is True

    def as_annotations(self) -> dict[str, Any]:
        """The hints as MCP names them."""
        return {
            "title": self.title,
            "readOnlyHint": self.read_only_hint,
            "destructiveHint": self.destructive_hint,
            "idempotentHint": self.idempotent_hint,
            "openWorldHint": self.open_world_hint,
        }

    def describe(self) -> str:
        """The hints a child set, as words: "read-only, idempotent"; "no annotations" when it set none."""
        words = [
            word
            for word, value in (
                ("read-only", self.read_only_hint),
                ("destructive", self.destructive_hint),
                ("idempotent", self.idempotent_hint),
                ("open-world", self.open_world_hint),
            )
            if value
        ]
        given = (self.read_only_hint, self.destructive_hint, self.idempotent_hint, self.open_world_hint)
        if all(value is None for value in given):
            return "no annotations"
        return ", ".join(words) or "not read-only"


@dataclass(frozen=True, kw_only=True)
class ToolOutcome:
    """What a tool call returned, in the neutral transcript's parts."""

    parts: tuple[Part, ...]
    is_error: bool = False
    error_kind: ErrorKind | None = None  # why it failed, for the run's error counts (None: the tool said so)
    # The result's structured content as the tool gave it (MCP `structuredContent`), which a program of code mode
    # gets from call_tool; None: the tool gave none.
    structured: Mapping[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class RunContext:
    """What an internal tool may know of the run that calls it: the run's model as it is at the call (a fallback
    may have switched it), and the images earlier tool results of the run returned, by the reference the model was
    told (`image-1`, ...), and the whole text of the results it kept, by handle (`result-1@<end of run_id>`, read by
    read_result). `NO_RUN` where no run calls the tool (a host calling image_gen directly)."""

    model: Provider | None = None
    images: Mapping[str, ImagePart] = field(default_factory=dict)
    results: Mapping[str, str] = field(default_factory=dict)
    run_id: str = ""
    call_id: str = ""  # the id the model gave this call
    tool_search: ToolFinder | None = None  # the run's tool search, when it is on (find_tools searches it)
    # Calls a tool of the run from within this call, as a direct call is made (run_code's programs): every check,
    # approval, event and record of one; None where no run calls the tool.
    call_tool: InnerCall | None = None


class ToolFinder(Protocol):
    """A run's tool search as find_tools uses it (core.tool_search.ToolSearch): the best `limit` matches for
    `query` among the run's selected tools, which the model is shown from its next turn."""

    def find(self, query: str, limit: int) -> list[ToolSpec]: ...


# `call_tool(name, arguments)`: the run's tool `name` (its full name) called with `arguments`, and its outcome; a
# call that was refused is an error outcome too, of kind "limit" where a limit of the run refused it (the program that
# made it is then stopped: a limit is no error for a program to catch and go on past).
InnerCall = Callable[[str, Any], Awaitable[ToolOutcome]]


NO_RUN = RunContext()


class InternalRun(Protocol):
    """How an internal tool runs: the validated arguments, and the run that calls it (a tool that needs nothing of
    the run takes it and lets it be)."""

    async def __call__(self, arguments: Mapping[str, Any], context: RunContext = NO_RUN, /) -> ToolOutcome: ...


@dataclass(frozen=True, kw_only=True)
class InternalTool:
    """A tool meta-agent implements itself (image_gen, describe_image); `run` is None in a declaration that has no
    backend yet."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    hints: ToolHints
    run: InternalRun | None = None


@dataclass(frozen=True, kw_only=True)
class ToolSpec:
    """One tool of the toolbox, with its names, schema, hints and trust level."""

    name: str
    alias: str
    server: str | None  # None for an internal tool
    tool: str  # the server's own name for it
    description: str
    input_schema: Mapping[str, Any]
    output_schema: Mapping[str, Any] | None
    hints: ToolHints
    trust: TrustLevel
    trust_source: str

    @property
    def internal(self) -> bool:
        return self.server is None
