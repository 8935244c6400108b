"""A tool call's time is the tool's: a call that waited for the user's answer is not reported as slow for it (the
progress line, the trace, `meta-agent runs show`'s "where time went")."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest
from conftest import tool_spec

from meta_agent.core import tool_step
from meta_agent.core.events import Event, ToolCallFinished
from meta_agent.core.loop import RunRequest, run
from meta_agent.core.messages import ModelResponse, TextPart, ToolCall
from meta_agent.core.tool_call import Verdict
from meta_agent.core.tools import ProgressFn, RunContext, ToolOutcome, ToolSpec
from meta_agent.providers.scripted import ScriptedProvider

pytestmark = [pytest.mark.anyio, pytest.mark.quick]

ANSWER_SECONDS = 600.0  # how long the user took to answer, on the clock the call is timed on


class Clock:
    """The clock tool calls are timed on, moved only by the test."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class SlowUser:
    """Answers yes, after ANSWER_SECONDS of the test's clock."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def remembered(self, spec: ToolSpec) -> str | None:
        return None

    async def ask(self, spec: ToolSpec, arguments: Mapping[str, Any]) -> Verdict:
        self.clock.now += ANSWER_SECONDS
        return Verdict(True, "yes")


class QuickTool:
    """A tool that takes 2 s of the test's clock."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    async def call(
        self,
        spec: ToolSpec,
        arguments: Mapping[str, Any],
        on_progress: ProgressFn | None = None,
        *,
        context: RunContext,
    ) -> ToolOutcome:
        self.clock.now += 2.0
        return ToolOutcome(parts=(TextPart(text="done"),))


async def test_the_wait_for_the_users_answer_is_not_the_tools_time(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(tool_step, "clock", clock)
    monkeypatch.setattr(tool_step, "ms_since", lambda started: round((clock() - started) * 1000))
    spec = dataclasses.replace(tool_spec({"type": "object"}), trust="ask")
    model = ScriptedProvider(
        [ModelResponse(tool_calls=(ToolCall(id="c1", name=spec.alias, arguments={}),)), ModelResponse(text="ok")]
    )
    events: list[Event] = []

    async def heard(event: Event) -> None:
        events.append(event)

    result = await run(
        RunRequest(task="Do it.", mode="agent", tools=(spec,)),
        provider=model,
        tools=QuickTool(clock),
        emit=heard,
        approver=SlowUser(clock),
    )
    [finished] = [event for event in events if isinstance(event, ToolCallFinished)]
    assert finished.ok and finished.duration_ms == 2000
    assert result.steps[0].tool_calls[0].duration_ms == 2000
