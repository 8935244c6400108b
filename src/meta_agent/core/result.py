"""A run's result, defined once: what the loop returns (`RunResult` and its records) is the structured result of
`ask`, `plan` and `agent` (README, MCP tools) that hosts get.

pydantic reads these dataclasses for the tools' output schema, which the MCP front advertises (`RunResult` is the
output model of front/tool_results.py's `RunAnswer`), and dumps every result through them (`RunResult.to_json`: the
tools' structured content, `meta-agent run --json`, the run index), so the schema and the JSON cannot drift. Each
field's `Field` says what hosts see of it: its description; `exclude_if`, left out of the JSON when empty; `Hidden`,
never sent (the transcript, the images, a tool call's error kind). A field that every result's JSON holds has no
default: the loop always fills it in, and the schema tells hosts they can count on it.

The dataclasses stay plain (pydantic builds no validator when they are made) and pydantic reads them only when a
result is first dumped or the schema first asked for: importing the loop costs no schema. DBOS pickles a durable run's
result (durable/runs.py): a field renamed or removed here would break the results of runs recorded before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from meta_agent.core.messages import ImagePart, Message

if TYPE_CHECKING:
    from pydantic import TypeAdapter

Mode = Literal["ask", "plan", "agent"]
StopReason = Literal["final", "max_steps", "token_budget", "deadline", "cancelled", "error"]
# What a run's error counts count: a tool call that failed ("tool": the tool said so, or failed to run), took too
# long ("timeout"), was not allowed ("approval"), or was refused or cut by a limit ("limit"); and each limit reached.
ErrorKind = Literal["tool", "timeout", "approval", "limit"]
# How a server a run could have used was not ready when the run started: it failed to start (and is not retried, as in
# `meta-agent run`), it is down and being retried (`restarting`), or it was still starting when the wait for it ended.
NotReady = Literal["failed", "restarting", "starting"]

T = TypeVar("T")


def _empty(value: object) -> bool:
    return not value


# A field the loop's callers get and hosts never do: left out of the JSON and of the output schema.
Hidden = Annotated[T, Field(exclude=True), SkipJsonSchema()]


@dataclass(frozen=True, kw_only=True)
class ToolCallRecord:
    name: str  # the MCP-facing name (server.tool)
    arguments: Mapping[str, Any]
    ok: bool
    duration_ms: int
    error: Annotated[str | None, Field(exclude_if=_empty)] = None
    error_kind: Hidden[ErrorKind | None] = None  # counted in the run's usage.errors
    # The call's program: the model's run_code call that made it (code mode), or none (the model called it itself).
    via: Annotated[
        str | None, Field(exclude_if=_empty, description="The tool whose program made this call (run_code).")
    ] = None


@dataclass(frozen=True, kw_only=True)
class StepRecord:
    index: int
    tool_calls: tuple[ToolCallRecord, ...]


@dataclass(frozen=True, kw_only=True)
class RunUsage:
    model_calls: int
    tool_calls: int
    input_tokens: int
    output_tokens: int
    reasoning_tokens: Annotated[int, Field(exclude_if=_empty, description="of the output tokens, spent reasoning")] = 0
    duration_ms: int = 0
    # Model calls by `provider:model`, and milliseconds by tool (summed over its calls).
    models: Annotated[
        Mapping[str, int], Field(description="model calls by model: more than one when a fallback chain took over")
    ] = field(default_factory=dict)
    tool_ms: Annotated[Mapping[str, int], Field(description="time spent in each tool")] = field(default_factory=dict)
    errors: Annotated[Mapping[ErrorKind, int], Field(description="failed tool calls and limits reached, by cause")] = (
        field(default_factory=dict)
    )


# A server whose tools a run could have used (its mode and `tools` patterns allow them), not ready when the run
# started: its tools were not offered to the model. (A comment, not a docstring: pydantic would put a docstring in the
# output schema.)
@dataclass(frozen=True, kw_only=True)
class UnavailableServer:
    server: str
    status: Annotated[NotReady, Field(description="failed, restarting (down, being retried) or starting")]
    reason: Annotated[str, Field(description="why, in one line, as `meta-agent check` says it")]

    def describe(self) -> str:
        """E.g. `time (failed: No module named mcp_server_time)`."""
        return f"{self.server} ({self.status}: {self.reason})"


def unavailable_line(servers: tuple[UnavailableServer, ...]) -> str:
    """The servers a run went without, in one line: `time (failed: ...); pg (restarting: ...)`."""
    return "; ".join(server.describe() for server in servers)


# Its docstring is the output schema's description, which hosts read.
@dataclass(frozen=True, kw_only=True)
class RunResult:
    """The structured result of `ask`, `plan` and `agent` (README, MCP tools)."""

    answer: str
    stop_reason: Annotated[
        StopReason, Field(description="final, or what ended the run first: a limit, cancellation, an error")
    ]
    run_id: str
    conversation_id: Annotated[str | None, Field(description="pass it back to `agent` to continue")] = None
    conversation_trimmed: Annotated[
        int, Field(exclude_if=_empty, description="oldest turns dropped to keep the conversation in bounds")
    ] = 0
    conversation_error: Annotated[
        str | None,
        Field(
            exclude_if=_empty,
            description="why this turn could not be saved in a conversation (conversation_id is then null)",
        ),
    ] = None
    unavailable_servers: Annotated[
        tuple[UnavailableServer, ...],
        Field(
            exclude_if=_empty,
            description="servers whose tools this run could have used that were not ready when it started (their "
            "tools were not offered), each with why; absent when every one was ready",
        ),
    ] = field(default_factory=tuple)  # a factory, not `()`: the schema shows no default, as for every list
    steps: tuple[StepRecord, ...]
    usage: RunUsage
    images: Hidden[tuple[ImagePart, ...]] = ()  # images internal tools made during the run, for the host's content
    images_left_out: Hidden[int] = 0  # images they made that `images` leaves out (core/result_images.py)
    transcript: Hidden[tuple[Message, ...]] = field(default=(), repr=False)  # the whole conversation so far

    def to_json(self) -> dict[str, Any]:
        """The structured result (README, MCP tools).

        Returns:
            JSON-ready data, in the shape of the `ask`, `plan` and `agent` tools' output schema; empty optional
            fields left out.
        """
        data: dict[str, Any] = _adapter().dump_python(self, mode="json")
        return data


def run_result_of(data: Mapping[str, Any]) -> RunResult:
    """A run's structured result (`RunResult.to_json()`) read back; its images and transcript, never in it, empty.

    Raises:
        ValueError: `data` is not a structured result (pydantic's ValidationError is one).
    """
    return _adapter().validate_python(data)


@cache
def _adapter() -> TypeAdapter[RunResult]:
    from pydantic import TypeAdapter  # on first use: the loop's import builds no schema

    return TypeAdapter(RunResult)
