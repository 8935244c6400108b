"""The structured result of `ask`, `plan` and `agent` (design.md §2.4), defined once.

The MCP front advertises these models to hosts as the tools' output schema, and every result is dumped through them
(`RunResult.to_json`: the tools' structured content, `meta-agent run --json`), so the schema and the JSON cannot
drift. Fields that are optional are left out of the JSON when empty, as `exclude_if` says on each.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


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
    duration_ms: int = 0
    tool_ms: dict[str, int] = Field(default_factory=dict, description="time spent in each tool")
    errors: dict[str, int] = Field(default_factory=dict, description="by category: tool, timeout, approval, limit")


class RunOut(BaseModel):
    """The structured result of `ask`, `plan` and `agent` (design.md §2.4)."""

    model_config = ConfigDict(from_attributes=True)  # read from the loop's RunResult

    answer: str
    stop_reason: str = Field(description="final, max_steps, token_budget, deadline, cancelled or error")
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
    steps: list[StepOut]
    usage: UsageOut
