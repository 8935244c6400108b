"""A trace is read back by the event types that wrote it (records/run_history.py): every kind of event the real
trace writer stores comes back as the event it was, a trace written before the reader changed still reads whole, and
`runs show` tells which servers a run went without.

fixtures/traces/ holds a trace a real run wrote (the openai SDK against the fake model, a real child, one server
whose command does not exist) with the version whose reader declared the trace's records a second time."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import pytest
from ulid import ULID

from meta_agent.cli.runs import account
from meta_agent.core.events import (
    ApprovalAnswered,
    ApprovalRequested,
    ChildProgress,
    Event,
    Heartbeat,
    LimitReached,
    ModelRequested,
    ModelResponded,
    ModelSwitched,
    ModelTurnStarted,
    RunFailed,
    RunFinished,
    RunStarted,
    Thinking,
    ToolCallFinished,
    ToolCallStarted,
)
from meta_agent.core.messages import (
    AssistantMessage,
    ImagePart,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCall,
    ToolMessage,
    ToolResult,
    ToolSchema,
    Usage,
    UserMessage,
)
from meta_agent.core.result import RunResult, RunUsage, StepRecord, ToolCallRecord, UnavailableServer
from meta_agent.records.run_history import Record, Trace, Untold, read
from meta_agent.records.trace_values import MAX_VALUE_BYTES
from meta_agent.records.traces import Redactor, TraceWriter

pytestmark = [pytest.mark.anyio, pytest.mark.quick]

OLD_TRACES = Path(__file__).parents[1] / "fixtures" / "traces"
OLD_RUN = "01M8FB5CRN69H5FP6FAG264RRE"
NOT_READY = UnavailableServer(server="gone", status="failed", reason="command not found: gone-server")


def result(run_id: str) -> RunResult:
    call = ToolCall(id="c1", name="f__echo", arguments={"text": "hi", "n": [1, 2.5, None, {"deep": True}]})
    return RunResult(
        answer="It said hi.",
        stop_reason="final",
        run_id=run_id,
        conversation_id="conv-1",
        unavailable_servers=(NOT_READY,),
        steps=(
            StepRecord(
                index=1,
                tool_calls=(
                    ToolCallRecord(name="f.echo", arguments=call.arguments, ok=False, duration_ms=4, error_kind="tool"),
                ),
            ),
        ),
        usage=RunUsage(model_calls=1, tool_calls=1, input_tokens=3, output_tokens=2, errors={"tool": 1}),
        images=(ImagePart(data="aGk=", mime_type="image/png"),),
        transcript=(
            UserMessage.of("echo hi"),
            AssistantMessage(
                tool_calls=(call,), thinking=(ThinkingPart(text="hm", signature="s", origin="anthropic"),)
            ),
            ToolMessage(
                results=(ToolResult(call_id="c1", name="f__echo", parts=(TextPart(text="hi"),), is_error=True),)
            ),
        ),
    )


def every_event(run_id: str) -> list[Any]:
    """One event of each kind, in a run's order, ending with `run_finished`; `run_failed` is `failed_run`'s end."""
    call = ToolCall(id="c1", name="f__echo", arguments={"text": "hi"})
    request = ModelRequest(
        system="be brief",
        messages=(UserMessage.of("echo hi"),),
        tools=(ToolSchema(name="f__echo", description="Echo.", parameters={"type": "object"}),),
    )
    response = ModelResponse(
        tool_calls=(call,), thinking=(ThinkingPart(text="hm"),), usage=Usage(input_tokens=3, output_tokens=2)
    )
    return [
        RunStarted(
            run_id=run_id,
            mode="agent",
            task="echo hi",
            model="openai:m",
            tools=("f.echo",),
            fallbacks=("anthropic:c",),
            unavailable_servers=(NOT_READY,),
        ),
        Heartbeat(step=0, waiting_for="the conversation's previous turn", elapsed_s=1.5, run_id=run_id),
        ModelTurnStarted(step=1),
        ModelRequested(step=1, request=request),
        ModelSwitched(step=1, failed="openai:m", error="HTTP 529: overloaded", brief="overloaded", next="anthropic:c"),
        Thinking(step=1, text="hm"),
        ModelResponded(
            step=1, text="", tool_calls=("f.echo",), input_tokens=3, output_tokens=2, duration_ms=7, response=response
        ),
        ApprovalRequested(step=1, call_id="c1", name="f.echo", arguments={"text": "hi"}),
        ApprovalAnswered(step=1, call_id="c1", name="f.echo", allowed=True, answer="allowed once"),
        ToolCallStarted(step=1, call_id="c1", name="f.echo", arguments={"text": "hi"}),
        ChildProgress(step=1, call_id="c1", name="f.echo", progress=1, total=None, message=None),
        ToolCallFinished(
            step=1,
            call_id="c1",
            name="f.echo",
            ok=True,
            duration_ms=4,
            result=(TextPart(text="hi"), ImagePart(data="aGk=", mime_type="image/png")),
            full_result=(TextPart(text="hi"),),
            kept="result-1",
        ),
        LimitReached(step=2, limit="max_steps"),
        RunFinished(result=result(run_id)),
    ]


def failed_run(run_id: str) -> list[Any]:
    return [every_event(run_id)[0], RunFailed(run_id=run_id, error="openai:m: refused", result=result(run_id))]


async def written(directory: Path, events: list[Any]) -> Trace:
    """`events` through the real trace writer, and the trace read back."""
    writer = TraceWriter(directory, Redactor([]))
    for event in events:
        await writer(event)
    await writer.aclose()
    return read(directory, events[0].run_id)


def as_read(event: Any) -> Event | Untold:
    """What the reader makes of an event: itself, but a model request (stored as what it adds to the previous)."""
    return Untold(kind="model_requested") if isinstance(event, ModelRequested) else event


def test_the_samples_hold_every_kind_of_event() -> None:
    kinds = {type(event) for event in every_event("r")} | {type(event) for event in failed_run("r")}
    assert kinds == set(get_args(Event))


@pytest.mark.parametrize("events", [every_event, failed_run])
async def test_every_event_reads_back_as_the_event_it_was(tmp_path: Path, events: Any) -> None:
    run_id = str(ULID())
    sent = events(run_id)
    trace = await written(tmp_path, sent)
    assert trace.skipped == 0
    assert [record.event for record in trace.records] == [as_read(event) for event in sent]
    assert trace.start is not None and trace.start[1] == sent[0] and trace.end == sent[-1]
    assert trace.status == "done"


async def test_a_value_the_writer_cut_still_reads(tmp_path: Path) -> None:
    """The writer stores no value over 1 MB whole (records/trace_values.py): the record is read, its text cut."""
    run_id = str(ULID())
    huge = "x" * (2 * MAX_VALUE_BYTES)
    finished = ToolCallFinished(
        step=1, call_id="c1", name="f.huge", ok=True, duration_ms=1, result=(TextPart(text=huge),)
    )
    trace = await written(tmp_path, [every_event(run_id)[0], finished, RunFailed(run_id=run_id, error="down")])
    assert trace.skipped == 0
    read_back = trace.records[1].event
    assert isinstance(read_back, ToolCallFinished) and isinstance(read_back.result[0], TextPart)
    text = read_back.result[0].text
    assert text.startswith("xxx") and text.endswith(" [cut: 2,000,000 characters in all]") and len(text) < len(huge)


def old_trace(tmp_path: Path, *extra: str) -> Trace:
    """The trace of before, copied to `tmp_path` with `extra` lines after its first."""
    lines = (OLD_TRACES / f"{OLD_RUN}.jsonl").read_text().splitlines()
    (tmp_path / f"{OLD_RUN}.jsonl").write_text("".join(f"{line}\n" for line in [lines[0], *extra, *lines[1:]]))
    return read(tmp_path, OLD_RUN)


def test_a_trace_written_before_reads_whole(tmp_path: Path) -> None:
    trace = old_trace(tmp_path)
    assert trace.skipped == 0 and trace.status == "done" and not trace.live
    kinds = [record.event.kind for record in trace.records]
    assert kinds == [
        "run_started",
        "model_turn_started",
        "model_requested",
        "thinking",
        "model_responded",
        "tool_call_started",
        "tool_call_finished",
        "model_turn_started",
        "model_requested",
        "model_responded",
        "tool_call_started",
        "tool_call_finished",
        "model_turn_started",
        "model_requested",
        "model_responded",
        "run_finished",
    ]
    untold = [record.event for record in trace.records if isinstance(record.event, Untold)]
    assert untold == [Untold(kind="model_requested")] * 3
    end = trace.end
    assert isinstance(end, RunFinished) and end.result.usage.tool_calls == 2 and len(end.result.transcript) == 6


def test_runs_show_tells_the_run_as_before_and_the_servers_it_went_without(tmp_path: Path) -> None:
    assert account(old_trace(tmp_path)) == [
        f"run {OLD_RUN} · agent with openai:fake-model · 2026-11-27T20:29:18.288+00:00",
        "task: echo something",
        "not ready, tools left out: gone (restarting: command not found: /nonexistent/meta-agent-test-cmd)",
        "step 1 · model (119 ms, 12 in / 7 out tokens)",
        "  thought: I should echo it.",
        '  asked for: f.echo {"text": "hello"}',
        "step 1 · f.echo ok (26 ms)",
        "  returned: hello",
        "step 2 · model (6 ms, 12 in / 7 out tokens)",
        '  asked for: f__nope {"x": 1}',
        "step 2 · f__nope error (0 ms)",
        "  returned: unknown tool 'f__nope'; the tools are: describe_image, f__append, f__confirm, f__crash, "
        "f__delete_file, f__echo, f__grow, f__hang, f__huge, f__image, f__lying, f__mutate, f__peak, f__pid, f__slow, "
        "f__wait_for_file, f__write_stderr, read_result",
        "step 3 · model (3 ms, 12 in / 7 out tokens)",
        "  said: It said hello.",
        "done · final · 3 model calls, 2 tool calls, 57 tokens",
        "answer: It said hello.",
        "where time went: model 128 ms (3 calls), f.echo 26 ms (1 call), f__nope 0 ms (1 call)",
    ]


async def test_a_run_that_had_every_server_says_nothing_of_them(tmp_path: Path) -> None:
    run_id = str(ULID())
    started = RunStarted(run_id=run_id, mode="ask", task="hi", model="openai:m", tools=())
    trace = await written(tmp_path, [started, RunFailed(run_id=run_id, error="down")])
    assert account(trace)[:2] == [f"run {run_id} · ask with openai:m · {trace.records[0].ts}", "task: hi"]
    assert not any("not ready" in line for line in account(trace))


LINES = {  # a line put into the trace of before: what the reader makes of it (None: skipped and counted)
    "a kind this version does not know": ('{"kind": "later_kind", "ts": "t", "x": 1}', Untold(kind="later_kind")),
    "a record without its time": ('{"kind": "thinking", "step": 1, "text": "hm"}', None),
    "a record its type refuses": ('{"kind": "thinking", "ts": "t", "step": "one", "text": "hm"}', None),
    "a run_finished whose result lacks its usage": (
        '{"kind": "run_finished", "ts": "t", "result": {"answer": "a", "stop_reason": "final", "run_id": "r", '
        '"steps": []}}',
        None,
    ),
    "a mode no run has": (
        '{"kind": "run_started", "ts": "t", "run_id": "r", "mode": "fly", "task": "t", "model": "m", "tools": []}',
        None,
    ),
}


@pytest.mark.parametrize(("line", "read_as"), LINES.values(), ids=LINES.keys())
def test_what_the_reader_makes_of_a_line(tmp_path: Path, line: str, read_as: Untold | None) -> None:
    trace = old_trace(tmp_path, line)
    records: list[Record] = list(trace.records)
    if read_as is None:
        assert trace.skipped == 1 and len(records) == 16
    else:
        assert trace.skipped == 0 and len(records) == 17 and records[1] == Record(ts="t", event=read_as)
