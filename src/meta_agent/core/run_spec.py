"""A run as its caller asked for it (`RunSpec`), and the body that runs one (`RunBody`).

Durable execution (durable/runs.py) stores the spec and calls the body again on whichever replica resumes the run,
so both live here, below it: durable execution is typed against the core, not against the engine that provides the
body. What a run has of its caller (the engine's `Caller`) is a type parameter: durable execution only keeps it for
the run started here and hands it back, and a resumed run has none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypeVar

from meta_agent.core.limits import Limits
from meta_agent.core.result import Mode, RunResult

CallerT = TypeVar("CallerT", contravariant=True)


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """A run as its caller asked for it: what any replica needs to run it (again, for a durable run)."""

    run_id: str
    task: str
    mode: Mode
    patterns: list[str] | None
    limits: Limits
    conversation_id: str  # the new conversation's id, unless `continues`
    continues: bool
    can_ask: bool  # the caller can be asked to approve a call
    owner: str | None = None  # whose run it is: an opaque subject (None: a spec made before runs had owners)
    # The trace context the run was started in (W3C, "": none): its spans' parent, here or on the replica resuming it.
    traceparent: str = ""
    tracestate: str = ""
    # The call that started it, as its caller's app knows it (the connection and the JSON-RPC id of its `tools/call`):
    # how the run view of a host finds the run (None: no such call, a run of `meta-agent run` or of an app).
    call_key: str | None = None
    # Code mode as the caller asked for it (`code` of agent and plan; None: META_AGENT_CODE_MODE decides).
    code: bool | None = None


class RunBody(Protocol[CallerT]):
    """Runs `spec` for `caller` (None: a durable run resumed after its replica stopped, which has no caller)."""

    async def __call__(self, spec: RunSpec, caller: CallerT | None, /) -> RunResult: ...
