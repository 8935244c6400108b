"""What a run reports, as it happens: frozen events in one union, the contract for every sink.

The loop emits them in order; the MCP progress reporter, the terminal printer and the trace writer read them.
Event `kind`s are public names: they do not change.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from meta_agent.core.limits import Limits
from meta_agent.core.messages import ModelRequest, ModelResponse, Part
from meta_agent.core.result import Mode, RunResult, StopReason, UnavailableServer


@dataclass(frozen=True, kw_only=True)
class RunStarted:
    run_id: str
    mode: Mode
    task: str
    model: str
    tools: tuple[str, ...]
    fallbacks: tuple[str, ...] = ()  # the models that take over, in order, when the model fails
    unavailable_servers: tuple[UnavailableServer, ...] = ()  # servers it could have used, not ready: not in `tools`
    limits: Limits | None = None  # the run's limits (None: an event of a caller that made it without them)
    kind: Literal["run_started"] = "run_started"


@dataclass(frozen=True, kw_only=True)
class ModelTurnStarted:
    step: int
    final: bool = False  # the last turn after a limit: no tools
    kind: Literal["model_turn_started"] = "model_turn_started"


@dataclass(frozen=True, kw_only=True)
class Thinking:
    step: int
    text: str
    kind: Literal["thinking"] = "thinking"


@dataclass(frozen=True, kw_only=True)
class ModelSwitched:
    """The run's model failed as a provider (unreachable, overloaded, rate limited, its key refused): the turn goes
    to the next model of the fallback chain, which the rest of the run keeps. `brief`: what failed, in a few words;
    `error`: the whole one-line error."""

    step: int
    failed: str
    error: str
    brief: str
    next: str
    error_type: str = ""  # the failure's class (`ProviderUnavailable`): telemetry's `error.type`
    kind: Literal["model_switched"] = "model_switched"


@dataclass(frozen=True, kw_only=True)
class ModelRequested:
    """What is sent to the model: the whole transcript and the exact tool schemas (for the trace)."""

    step: int
    request: ModelRequest
    kind: Literal["model_requested"] = "model_requested"


@dataclass(frozen=True, kw_only=True)
class ModelResponded:
    step: int
    text: str
    tool_calls: tuple[str, ...]  # MCP-facing names, or the alias when the model named no known tool
    input_tokens: int
    output_tokens: int
    duration_ms: int
    response: ModelResponse | None = None  # the whole response: text, tool calls, thinking, usage
    kind: Literal["model_responded"] = "model_responded"


@dataclass(frozen=True, kw_only=True)
class ToolCallStarted:
    step: int
    call_id: str
    name: str
    arguments: Mapping[str, Any]
    server: str | None = None  # the child server whose tool it is; None: an internal tool (or no known tool)
    within: str | None = None  # the call id of the program (run_code) that made this call; None: the model made it
    kind: Literal["tool_call_started"] = "tool_call_started"


@dataclass(frozen=True, kw_only=True)
class ToolCallFinished:
    step: int
    call_id: str
    name: str
    ok: bool
    duration_ms: int
    error: str | None = None
    result: tuple[Part, ...] = ()  # as the model gets it (placeholders, cut)
    full_result: tuple[Part, ...] = ()  # as the tool returned it
    kept: str | None = None  # the handle under which the run keeps the whole result for read_result
    kind: Literal["tool_call_finished"] = "tool_call_finished"


@dataclass(frozen=True, kw_only=True)
class ChildProgress:
    step: int
    call_id: str
    name: str
    progress: float
    total: float | None
    message: str | None
    kind: Literal["child_progress"] = "child_progress"


@dataclass(frozen=True, kw_only=True)
class Heartbeat:
    step: int  # 0: before the run's first step (a turn queued behind another turn of its conversation)
    waiting_for: str  # "model", a tool's MCP-facing name, "the user's answer", "the conversation's previous turn"
    elapsed_s: float
    run_id: str = ""  # given at step 0, where this may be the run's first progress line: a caller learns its run id
    kind: Literal["heartbeat"] = "heartbeat"


@dataclass(frozen=True, kw_only=True)
class ApprovalRequested:
    """The user is being asked whether a tool may run."""

    step: int
    call_id: str
    name: str
    arguments: Mapping[str, Any]
    kind: Literal["approval_requested"] = "approval_requested"


@dataclass(frozen=True, kw_only=True)
class ApprovalAnswered:
    """What came of it: `answer` is "allowed once", "allowed for this session", "denied", "declined", "cancelled",
    "already allowed for this session" (or "for this conversation", "for the rest of this run"), or why nobody could
    be asked."""

    step: int
    call_id: str
    name: str
    allowed: bool
    answer: str
    kind: Literal["approval_answered"] = "approval_answered"


@dataclass(frozen=True, kw_only=True)
class LimitReached:
    step: int
    limit: StopReason
    kind: Literal["limit_reached"] = "limit_reached"


@dataclass(frozen=True, kw_only=True)
class RunFinished:
    result: RunResult
    kind: Literal["run_finished"] = "run_finished"


@dataclass(frozen=True, kw_only=True)
class RunFailed:
    """The run ended with stop reason `error`: `error` says why in one line; `result` is what the run had done."""

    run_id: str
    error: str
    result: RunResult | None = None
    error_type: str = ""  # the failure's class (`ProviderError`, a bug's): telemetry's `error.type`
    kind: Literal["run_failed"] = "run_failed"


Event = (
    RunStarted
    | ModelTurnStarted
    | ModelRequested
    | ModelSwitched
    | Thinking
    | ModelResponded
    | ToolCallStarted
    | ToolCallFinished
    | ChildProgress
    | Heartbeat
    | ApprovalRequested
    | ApprovalAnswered
    | LimitReached
    | RunFinished
    | RunFailed
)

# A sink of the event stream: the MCP progress reporter, the terminal printer, the trace writer.
Emit = Callable[[Event], Awaitable[None]]
