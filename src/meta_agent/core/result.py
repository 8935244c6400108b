"""A run's result, defined once: what the loop returns (`RunResult` and its records) and the structured result of
`ask`, `plan` and `agent` (README, MCP tools) that hosts get.

The MCP front advertises the pydantic models below to hosts as the tools' output schema, and every result is dumped
through them (`RunResult.to_json`: the tools' structured content, `meta-agent run --json`), so the schema and the JSON
cannot drift. Fields that are optional are left out of the JSON when empty, as `exclude_if` says on each.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from meta_agent.core.messages import ImagePart, Message

Mode = Literal["ask", "plan", "agent"]
StopReason = Literal["final", "max_steps", "token_budget", "deadline", "cancelled", "error"]
# What a run's error counts count: a tool call that failed ("tool": the tool said so, or failed to run), took too
# long ("timeout"), was not allowed ("approval"), or was refused or cut by a limit ("limit"); and each limit reached.
ErrorKind = Literal["tool", "timeout", "approval", "limit"]
# How a server a run could have used was not ready when the run started: it failed to start (and is not retried, as in
# `meta-agent run`), it is down and being retried (`restarting`), or it was still starting when the wait for it ended.
NotReady = Literal["failed", "restarting", "starting"]


# -- what the loop returns ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ToolCallRecord:
    name: str  # the MCP-facing name (server.tool)
    arguments: Mapping[str, Any]
    ok: bool
    duration_ms: int
    error: str | None = None
    error_kind: ErrorKind | None = None


@dataclass(frozen=True, kw_only=True)
class StepRecord:
    index: int
    tool_calls: tuple[ToolCallRecord, ...] = ()


@dataclass(frozen=True, kw_only=True)
class RunUsage:
    model_calls: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0  # of the output tokens
    duration_ms: int = 0
    models: Mapping[str, int] = field(default_factory=dict)  # model calls by model (`provider:model`)
    tool_ms: Mapping[str, int] = field(default_factory=dict)  # time spent in each tool, summed over its calls
    errors: Mapping[ErrorKind, int] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class UnavailableServer:
    """A server whose tools a run could have used (its mode and `tools` patterns allow them), not ready when the run
    started: its tools were not offered to the model."""

    server: str
    status: NotReady
    reason: str  # one line, as `meta-agent check` says it ("command not found: ...")

    def describe(self) -> str:
        """E.g. `time (failed: No module named mcp_server_time)`."""
        return f"{self.server} ({self.status}: {self.reason})"


def unavailable_line(servers: tuple[UnavailableServer, ...]) -> str:
    """The servers a run went without, in one line: `time (failed: ...); pg (restarting: ...)`."""
    return "; ".join(server.describe() for server in servers)


@dataclass(frozen=True, kw_only=True)
class RunResult:
    answer: str
    stop_reason: StopReason
    run_id: str
    steps: tuple[StepRecord, ...] = ()
    usage: RunUsage = field(default_factory=RunUsage)
    images: tuple[ImagePart, ...] = ()  # images internal tools made during the run, for the host
    conversation_id: str | None = None
    conversation_trimmed: int = 0  # oldest turns of the conversation dropped to keep it within bounds
    conversation_error: str | None = None  # why this turn is in no conversation (it could not be saved)
    unavailable_servers: tuple[UnavailableServer, ...] = ()  # servers the run could have used that were not ready
    transcript: tuple[Message, ...] = field(default=(), repr=False)  # the whole conversation so far

    def to_json(self) -> dict[str, Any]:
        """The structured result (README, MCP tools), as `RunOut` below dumps it.

        Returns:
            JSON-ready data, in the shape of the `ask`, `plan` and `agent` tools' output schema; empty optional
            fields left out.
        """
        return RunOut.model_validate(self).model_dump()


# -- what hosts get: the structured result and its schema --------------------------------------------------------------


def _empty(value: object) -> bool:
    return not value


class ToolCallOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)  # read from the loop's ToolCallRecord

    name: str
    arguments: dict[str, Any]
    ok: bool
    duration_ms: int
    error: str | None = Field(default=None, exclude_if=_empty)


class StepOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    index: int
    tool_calls: list[ToolCallOut]


class UsageOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    model_calls: int
    tool_calls: int
    input_tokens: int
    output_tokens: int
    reasoning_tokens: int = Field(default=0, exclude_if=_empty, description="of the output tokens, spent reasoning")
    duration_ms: int = 0
    models: dict[str, int] = Field(
        default_factory=dict, description="model calls by model: more than one when a fallback chain took over"
    )
    tool_ms: dict[str, int] = Field(default_factory=dict, description="time spent in each tool")
    errors: dict[ErrorKind, int] = Field(
        default_factory=dict, description="failed tool calls and limits reached, by cause"
    )


class UnavailableServerOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    server: str
    status: NotReady = Field(description="failed, restarting (down, being retried) or starting")
    reason: str = Field(description="why, in one line, as `meta-agent check` says it")


class RunOut(BaseModel):
    """The structured result of `ask`, `plan` and `agent` (README, MCP tools)."""

    model_config = ConfigDict(from_attributes=True)  # read from the loop's RunResult

    answer: str
    stop_reason: StopReason = Field(description="final, or what ended the run first: a limit, cancellation, an error")
    run_id: str
    conversation_id: str | None = Field(default=None, description="pass it back to `agent` to continue")
    conversation_trimmed: int = Field(
        default=0, exclude_if=_empty, description="oldest turns dropped to keep the conversation in bounds"
    )
    conversation_error: str | None = Field(
        default=None,
        exclude_if=_empty,
        description="why this turn could not be saved in a conversation (conversation_id is then null)",
    )
    unavailable_servers: list[UnavailableServerOut] = Field(
        default_factory=list,
        exclude_if=_empty,
        description="servers whose tools this run could have used that were not ready when it started (their tools "
        "were not offered), each with why; absent when every one was ready",
    )
    steps: list[StepOut]
    usage: UsageOut
