"""The loop, driven by the scripted provider, with child servers in memory: doubles that offer the tools of our fault
server and mcp-server-time as Python functions (tests/fixtures/tool_double.py). What a real child does under the loop
(a crash, a timeout, a cancelled call) is in test_loop_children.py."""

from __future__ import annotations

import base64
import dataclasses
import itertools
import re
from collections.abc import Mapping
from typing import Any, get_args

import anyio
import pytest
from pydantic import TypeAdapter
from server_doubles import fault_double, time_double
from tool_double import ToolDouble

from meta_agent.core import events as ev
from meta_agent.core.limits import Limits
from meta_agent.core.loop import RunRequest, run
from meta_agent.core.messages import (
    MAX_ARGUMENT_CHARS,
    MAX_ARGUMENT_DEPTH,
    ImagePart,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCall,
    ToolMessage,
    Usage,
)
from meta_agent.core.result import ErrorKind, RunResult, StopReason
from meta_agent.core.tool_call import ArgumentCheck, Verdict
from meta_agent.core.tools import NO_RUN, InternalTool, RunContext, ToolHints, ToolOutcome, ToolSpec
from meta_agent.errors import ProviderUnavailable, ScriptError
from meta_agent.internal.read_result import READ_RESULT
from meta_agent.providers.scripted import ScriptedProvider
from meta_agent.toolbox.build import Toolbox, ToolCaller

pytestmark = [pytest.mark.anyio, pytest.mark.quick]
_ids = itertools.count(1)


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


async def _fake_image(arguments: Mapping[str, Any], _context: RunContext = NO_RUN) -> ToolOutcome:
    return ToolOutcome(
        parts=(TextPart(text=f"made {arguments['prompt']}"), ImagePart(data="AAAA", mime_type="image/png"))
    )


PAINT = InternalTool(
    name="paint",
    description="Make a picture.",
    input_schema={"type": "object", "properties": {"prompt": {"type": "string"}}, "required": ["prompt"]},
    hints=ToolHints(read_only_hint=True),
    run=_fake_image,
)


Servers = dict[str, ToolDouble]


@pytest.fixture
def servers() -> Servers:
    """The loop's child servers, fresh for each test: two with the fault server's tools (`slowpoke` times out after
    0.5 s) and a clock."""
    doubles = [
        fault_double("f", trust={"mutate": "always", "delete_file": "never"}),
        fault_double("slowpoke", timeout=0.5),
        time_double(),
    ]
    return {double.name: double for double in doubles}


def call(alias: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=f"call_{next(_ids)}", name=alias, arguments=arguments)


def reply(text: str = "", *calls: ToolCall, tokens: tuple[int, int] = (10, 5)) -> ModelResponse:
    return ModelResponse(text=text, tool_calls=calls, usage=Usage(input_tokens=tokens[0], output_tokens=tokens[1]))


class Recorder:
    def __init__(self) -> None:
        self.events: list[ev.Event] = []

    async def __call__(self, event: ev.Event) -> None:
        self.events.append(event)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events if e.kind != "heartbeat"]

    def of(self, cls: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, cls)]


async def go(
    servers: Servers,
    script: list[Any],
    *,
    mode: str = "agent",
    patterns: list[str] | None = None,
    limits: Limits | None = None,
    provider: ScriptedProvider | None = None,
    **options: Any,
) -> tuple[RunResult, ScriptedProvider, Recorder]:
    box = Toolbox.build([PAINT], servers.values())
    provider = provider or ScriptedProvider(script)
    recorder = Recorder()
    request = RunRequest(
        task="do the task",
        mode=mode,  # type: ignore[arg-type]
        tools=tuple(box.select(patterns, mode=mode)),  # type: ignore[arg-type]
        limits=limits or Limits(),
        **{k: v for k, v in options.items() if k in ("max_result_chars",)},
    )
    result = await run(
        request,
        provider=provider,
        tools=ToolCaller(servers, [PAINT]),
        emit=recorder,
        **{k: v for k, v in options.items() if k in ("approver", "heartbeat_interval")},
    )
    provider.assert_done()
    return result, provider, recorder


def tool_results(request: ModelRequest, at: int = -1) -> list[tuple[str, bool]]:
    message = request.messages[at]
    assert isinstance(message, ToolMessage)
    return [(r.text, r.is_error) for r in message.results]


async def test_a_plain_answer(servers: Servers) -> None:
    result, provider, rec = await go(servers, [reply("42")])
    assert (result.answer, result.stop_reason) == ("42", "final")
    usage = result.usage
    assert (usage.model_calls, usage.tool_calls, usage.input_tokens, usage.output_tokens) == (1, 0, 10, 5)
    assert (usage.tool_ms, usage.errors) == ({}, {}) and usage.duration_ms >= 0
    assert rec.kinds() == ["run_started", "model_turn_started", "model_requested", "model_responded", "run_finished"]
    assert rec.of(ev.RunFinished)[0].result == result
    assert len(result.run_id) == 26  # a ULID
    sent = provider.requests[0]
    assert sent.tool_choice == "auto"
    assert {t.name for t in sent.tools} >= {"paint", "f__echo", "time__get_current_time"}


async def test_thinking_becomes_an_event(servers: Servers) -> None:
    thought = ModelResponse(
        text="yes", thinking=(ThinkingPart(text="weighing it"), ThinkingPart(text="", redacted=True))
    )
    _, _, rec = await go(servers, [thought])
    assert [(e.step, e.text) for e in rec.of(ev.Thinking)] == [(1, "weighing it")]
    assert rec.kinds().index("thinking") < rec.kinds().index("model_responded")


async def test_a_tool_step_then_the_answer(servers: Servers) -> None:
    result, provider, rec = await go(
        servers, [reply("", call("time__get_current_time", timezone="Asia/Tokyo")), reply("It is late in Tokyo.")]
    )
    assert result.stop_reason == "final"
    [(text, is_error)] = tool_results(provider.requests[1])
    assert "Asia/Tokyo" in text and not is_error
    assert [s.index for s in result.steps] == [1, 2]
    [record] = result.steps[0].tool_calls
    assert (record.name, dict(record.arguments), record.ok) == (
        "time.get_current_time",
        {"timezone": "Asia/Tokyo"},
        True,
    )
    assert rec.kinds() == [
        "run_started",
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
    assert rec.of(ev.ModelResponded)[0].tool_calls == ("time.get_current_time",)
    assert result.usage.model_calls == 2 and result.usage.tool_calls == 1


async def test_calls_of_one_step_run_concurrently_and_results_keep_call_order(servers: Servers) -> None:
    slow, fast = call("f__slow", seconds=0.4, steps=1), call("f__echo", text="quick")
    result, provider, rec = await go(servers, [reply("", slow, fast), reply("done")])
    # Both started before either finished, and the fast one took a fraction of the slow one's time...
    kinds = [(e.kind, e.call_id) for e in rec.events if e.kind in ("tool_call_started", "tool_call_finished")]
    assert kinds[:2] == [("tool_call_started", slow.id), ("tool_call_started", fast.id)]
    took = {record.name: record.duration_ms for record in result.steps[0].tool_calls}
    assert took["f.echo"] < took["f.slow"]
    # ...but their results are named and told in the order the model asked (a replay names them alike).
    assert kinds[2:] == [("tool_call_finished", slow.id), ("tool_call_finished", fast.id)]
    assert [t for t, _ in tool_results(provider.requests[1])] == ["slept 0.4", "quick"]


async def test_results_are_named_in_call_order_whichever_finishes_first(servers: Servers) -> None:
    """Two long results and two images of one step: the first call's are result-1 and image-1 though it ends last,
    so that a durable run's replay, whose calls end in another order, names them as its first start did."""
    calls = [
        call("f__huge", size=2_000, seconds=0.3),
        call("f__huge", size=2_000),
        call("f__image", seconds=0.3),
        call("f__image"),
    ]
    tools = (*Toolbox.build([READ_RESULT], servers.values()).select(),)
    provider = ScriptedProvider([reply("", *calls), reply("done")])
    run_id = "01KAAAAAAAAAAAAAAAAAB7K2QZ"
    request = RunRequest(task="t", mode="agent", tools=tools, run_id=run_id, max_result_chars=1_000)
    await run(request, provider=provider, tools=ToolCaller(servers, [READ_RESULT]))
    told = [text for text, _ in tool_results(provider.requests[1])]
    tag = run_id[-6:]
    assert f"result-1@{tag}" in told[0] and f"result-2@{tag}" in told[1]
    assert "image-1" in told[2] and "image-2" in told[3]
    assert "image-2" not in told[2]


async def test_mutating_calls_to_one_server_go_one_at_a_time(servers: Servers) -> None:
    calls = [call("f__mutate", seconds=0.1) for _ in range(3)]
    reads = [call("f__slow", seconds=0.1, steps=1) for _ in range(2)]
    _result, provider, _ = await go(servers, [reply("", *calls, *reads), reply("", call("f__peak")), reply("ok")])
    assert all(not is_error for _, is_error in tool_results(provider.requests[1]))
    assert tool_results(provider.requests[2]) == [("1", False)]  # never two mutate calls at once


async def test_bad_arguments_an_unknown_tool_and_bad_json_are_errors_the_model_sees(servers: Servers) -> None:
    bad_json = ToolCall(id="c9", name="f__echo", arguments={}, invalid_arguments="not JSON (Expecting value)")
    result, provider, _rec = await go(
        servers, [reply("", call("f__echo", text=5), call("nope__tool"), call("f__echo"), bad_json), reply("recovered")]
    )
    assert result.answer == "recovered"
    errors = tool_results(provider.requests[1])
    assert all(is_error for _, is_error in errors)
    assert errors[0][0] == "invalid arguments for f__echo: text: 5 is not of type 'string'"
    assert errors[1][0].startswith("unknown tool 'nope__tool'; the tools are: ")
    assert errors[2][0] == "invalid arguments for f__echo: 'text' is a required property"
    assert errors[3][0] == "the arguments for f__echo were not JSON (Expecting value); send a JSON object"
    assert [r.ok for r in result.steps[0].tool_calls] == [False] * 4
    assert result.steps[0].tool_calls[1].name == "nope__tool"


async def test_the_step_limit_ends_with_a_last_turn_without_tools(servers: Servers) -> None:
    script = [reply("", call("f__echo", text=str(i))) for i in range(2)] + [reply("best I can do")]
    result, provider, rec = await go(servers, script, limits=Limits(max_steps=2))
    assert (result.stop_reason, result.answer) == ("max_steps", "best I can do")
    last = provider.requests[-1]
    assert last.tool_choice == "none" and last.tools  # tools described, not callable
    assert "the step limit (2 steps) was reached" in last.messages[-1].parts[0].text  # type: ignore[union-attr]
    assert rec.of(ev.LimitReached)[0].limit == "max_steps"
    assert rec.of(ev.ModelTurnStarted)[-1].final
    assert result.usage.model_calls == 3


async def test_the_token_budget(servers: Servers) -> None:
    script = [
        reply("", call("f__echo", text="a"), tokens=(80, 20)),
        reply("", call("f__echo", text="b"), tokens=(80, 20)),
        reply("enough"),
    ]
    result, _, _ = await go(servers, script, limits=Limits(token_budget=150))
    assert (result.stop_reason, result.answer) == ("token_budget", "enough")
    assert result.usage.input_tokens == 80 + 80 + 10


async def test_the_time_limit_cuts_a_slow_model_call_and_still_answers(servers: Servers) -> None:
    async def never_answers(request: ModelRequest) -> ModelResponse:
        await anyio.sleep_forever()
        raise AssertionError

    result, _provider, _ = await go(
        servers, [never_answers, reply("out of time, here is what I know")], limits=Limits(time_limit=0.3)
    )
    assert (result.stop_reason, result.answer) == ("deadline", "out of time, here is what I know")


async def test_the_time_limit_cuts_slow_tool_calls(servers: Servers) -> None:
    result, provider, _ = await go(
        servers,
        [reply("", call("f__hang"), call("f__echo", text="fast")), reply("partial")],
        limits=Limits(time_limit=0.5),
    )
    assert result.stop_reason == "deadline"
    # The cut calls get results too (every call needs one), then the last turn is asked for an answer.
    assert tool_results(provider.requests[1], at=-2) == [
        ("cancelled: the run's time limit passed", True),
        ("fast", False),
    ]


async def test_too_many_calls_in_one_step_are_refused(servers: Servers) -> None:
    calls = [call("f__echo", text=str(i)) for i in range(3)]
    _, provider, _ = await go(servers, [reply("", *calls), reply("ok")], limits=Limits(max_tool_calls_per_step=2))
    results = tool_results(provider.requests[1])
    assert results[:2] == [("0", False), ("1", False)]
    assert results[2] == ("not run: at most 2 tool calls per step; call it again in the next step", True)


async def test_heartbeats_and_child_progress_while_a_tool_is_slow(servers: Servers) -> None:
    _, _, rec = await go(
        servers, [reply("", call("f__slow", seconds=0.5, steps=3)), reply("ok")], heartbeat_interval=0.1
    )
    beats = rec.of(ev.Heartbeat)
    assert beats and all(b.waiting_for == "f.slow" for b in beats)
    progress = rec.of(ev.ChildProgress)
    assert [(p.name, p.progress, p.message) for p in progress] == [
        ("f.slow", 1, "step 1 of 3"),
        ("f.slow", 2, "step 2 of 3"),
        ("f.slow", 3, "step 3 of 3"),
    ]


async def test_ask_mode_sees_internal_tools_only_and_runs_one_without_a_second_turn(servers: Servers) -> None:
    result, provider, _ = await go(
        servers, [reply("Here:", call("paint", prompt="a cat"), call("paint", prompt="a dog"))], mode="ask"
    )
    assert [t.name for t in provider.requests[0].tools] == ["paint"]
    assert result.answer == "Here:\n\nmade a cat"
    assert result.images == (ImagePart(data="AAAA", mime_type="image/png"),)
    assert len(provider.requests) == 1 and result.usage.tool_calls == 1


async def test_plan_mode_offers_read_only_tools_only(servers: Servers) -> None:
    result, provider, _ = await go(servers, [reply("1. look\n2. act")], mode="plan")
    names = {t.name for t in provider.requests[0].tools}
    assert "f__echo" in names and "time__get_current_time" in names
    assert not names & {"f__mutate", "f__delete_file", "f__crash"}
    assert "numbered plan" in provider.requests[0].system
    assert result.answer == "1. look\n2. act"


class ScriptedApprover:
    """Answers every question with `verdict`; remembers tools when told to (like "allow for this session")."""

    def __init__(self, verdict: Verdict | None, *, remember: bool = False) -> None:
        self.verdict = verdict
        self.remember = remember
        self.asked: list[tuple[str, dict[str, Any]]] = []
        self.allowed: set[str] = set()

    def remembered(self, spec: ToolSpec) -> str | None:
        return "for this session" if spec.name in self.allowed else None

    async def ask(self, spec: ToolSpec, arguments: Mapping[str, Any]) -> Verdict:
        assert self.verdict is not None
        self.asked.append((spec.name, dict(arguments)))
        if self.remember and self.verdict.allowed:
            self.allowed.add(spec.name)
        return self.verdict


@pytest.mark.parametrize(
    ("alias", "verdict", "expected"),
    [
        ("f__delete_file", None, "f.delete_file is blocked (trust level never, from trust 'delete_file')"),
        (
            "slowpoke__delete_file",
            None,
            "slowpoke.delete_file needs the user's approval and this caller cannot be asked",
        ),
        ("slowpoke__delete_file", Verdict(False, "denied"), "the user did not allow slowpoke.delete_file (denied)"),
        (
            "slowpoke__delete_file",
            Verdict(False, "cancelled"),
            "the user did not allow slowpoke.delete_file (cancelled)",
        ),
        ("slowpoke__delete_file", Verdict(True, "allowed once"), "deleted /tmp/x"),
    ],
)
async def test_trust_levels_gate_calls(servers: Servers, alias: str, verdict: Verdict | None, expected: str) -> None:
    approver = ScriptedApprover(verdict)
    options = {} if verdict is None else {"approver": approver}
    _, provider, rec = await go(servers, [reply("", call(alias, path="/tmp/x")), reply("ok")], **options)
    [(text, _)] = tool_results(provider.requests[1])
    assert text.startswith(expected)
    asked = [] if verdict is None or alias.startswith("f__") else [("slowpoke.delete_file", {"path": "/tmp/x"})]
    assert approver.asked == asked
    # every question and answer is an event
    assert [(e.name, e.arguments) for e in rec.of(ev.ApprovalRequested)] == asked
    answers = [(e.allowed, e.answer) for e in rec.of(ev.ApprovalAnswered)]
    assert answers == ([] if not asked else [(verdict.allowed, verdict.answer)])  # type: ignore[union-attr]


async def test_allowed_for_the_session_is_not_asked_again(servers: Servers) -> None:
    approver = ScriptedApprover(Verdict(True, "allowed for this session"), remember=True)
    script = [
        reply("", call("slowpoke__delete_file", path="/a")),
        reply("", call("slowpoke__delete_file", path="/b")),
        reply("done"),
    ]
    _, _, rec = await go(servers, script, approver=approver)
    assert approver.asked == [("slowpoke.delete_file", {"path": "/a"})]
    assert [e.answer for e in rec.of(ev.ApprovalAnswered)] == [
        "allowed for this session",
        "already allowed for this session",
    ]


async def test_images_become_placeholders_for_a_model_without_image_input(servers: Servers) -> None:
    """Either way the model is told each image's reference, counted over the run."""
    script = [reply("", call("f__image")), reply("", call("f__image")), reply("saw them")]
    provider = ScriptedProvider(script, accepts_images=False)
    _, provider, _ = await go(servers, [], provider=provider)
    [(text, _)] = tool_results(provider.requests[2])
    assert re.fullmatch(r"\[image-2: image/png, [0-9]+ bytes, not shown\]", text), text
    with_images = ScriptedProvider([reply("", call("f__image")), reply("saw it")])
    _, with_images, _ = await go(servers, [], provider=with_images)
    message = with_images.requests[1].messages[-1]
    assert isinstance(message, ToolMessage)
    label, image = message.results[0].parts
    assert isinstance(label, TextPart) and isinstance(image, ImagePart)
    assert label.text == f"[image-1: image/png, {len(base64.b64decode(image.data))} bytes]"


async def test_a_huge_result_is_cut_with_a_marker(servers: Servers) -> None:
    _, provider, _ = await go(servers, [reply("", call("f__huge", size=100_000)), reply("ok")], max_result_chars=1000)
    [(text, _)] = tool_results(provider.requests[1])
    assert text == "x" * 1000 + "\n[... cut 99,000 of 100,000 characters]"


async def test_a_provider_failure_ends_the_run(servers: Servers) -> None:
    with pytest.raises(ProviderUnavailable):
        await go(servers, [ProviderUnavailable("openai:x: cannot connect")])


@pytest.mark.parametrize(
    ("failure", "error"),
    [
        (ProviderUnavailable("openai:x: cannot connect"), "openai:x: cannot connect"),
        (TypeError("a bug of ours\nsecond line"), "TypeError: a bug of ours"),
    ],
)
async def test_a_failed_run_ends_with_stop_reason_error(servers: Servers, failure: Exception, error: str) -> None:
    """The last event says why, with what the run had done; the failure itself goes on to the caller."""
    provider = ScriptedProvider([reply("", call("f__echo", text="x")), failure])
    request = RunRequest(task="t", mode="agent", tools=tuple(Toolbox.build([], servers.values()).select()))
    recorder = Recorder()
    with pytest.raises(type(failure)):
        await run(request, provider=provider, tools=ToolCaller(servers, []), emit=recorder)
    last = recorder.events[-1]
    assert isinstance(last, ev.RunFailed) and last.result is not None
    assert (last.run_id, last.error, last.result.run_id) == (request.run_id, error, request.run_id)
    assert (last.result.stop_reason, last.result.answer) == ("error", f"(no answer: {error})")
    assert [call.name for step in last.result.steps for call in step.tool_calls] == ["f.echo"]


def nested(depth: int) -> dict[str, Any]:
    """An object `depth` levels deep."""
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


async def _kept(_arguments: Mapping[str, Any], _context: RunContext = NO_RUN) -> ToolOutcome:
    return ToolOutcome(parts=(TextPart(text="kept"),))


KEEP = InternalTool(
    name="keep",
    description="Takes any object.",
    input_schema={"type": "object"},
    hints=ToolHints(read_only_hint=True),
    run=_kept,
)


async def test_arguments_nested_deeper_than_the_bound_are_an_error_the_model_sees(servers: Servers) -> None:
    """As deep as MAX_ARGUMENT_DEPTH runs; one level more is refused before anything holds it (the record, the
    transcript sent back, the tool), whichever provider it came from."""
    deepest, too_deep = nested(MAX_ARGUMENT_DEPTH), {"x": nested(MAX_ARGUMENT_DEPTH)}
    provider = ScriptedProvider([reply("", call("keep", **deepest), call("keep", **too_deep)), reply("went on")])
    request = RunRequest(task="t", mode="agent", tools=tuple(Toolbox.build([KEEP], servers.values()).select()))
    result = await run(request, provider=provider, tools=ToolCaller(servers, [KEEP]))
    assert (result.answer, result.stop_reason) == ("went on", "final")
    kept, refused = result.steps[0].tool_calls
    assert (kept.ok, kept.arguments) == (True, deepest)
    assert (refused.ok, refused.arguments) == (False, {})
    told = f"the arguments for keep were nested more than {MAX_ARGUMENT_DEPTH} levels deep; send a JSON object"
    assert tool_results(provider.requests[1]) == [("kept", False), (told, True)]
    assert provider.requests[1].messages[-2].tool_calls[1].arguments == {}  # type: ignore[union-attr]


async def test_arguments_larger_than_the_bound_are_an_error_the_model_sees(servers: Servers) -> None:
    """Arguments of MAX_ARGUMENT_CHARS characters run; larger ones (a model's 100 MB data URL) are refused before
    anything holds them: the tool, the record, the transcript sent back in every later turn."""
    largest = {"text": "x" * (MAX_ARGUMENT_CHARS - len("text") - 2)}
    over = {"text": "x" * MAX_ARGUMENT_CHARS}
    many_keys = {f"{n:0>1000}": n for n in range(MAX_ARGUMENT_CHARS // 1000)}  # long names, short values
    calls = [call("keep", **largest), call("keep", **over), call("keep", **many_keys)]
    provider = ScriptedProvider([reply("", *calls), reply("went on")])
    request = RunRequest(task="t", mode="agent", tools=tuple(Toolbox.build([KEEP], servers.values()).select()))
    result = await run(request, provider=provider, tools=ToolCaller(servers, [KEEP]))
    assert (result.answer, result.stop_reason) == ("went on", "final")
    kept, refused, refused_too = result.steps[0].tool_calls
    assert kept.ok and len(kept.arguments["text"]) == len(largest["text"])
    assert (refused.ok, refused.arguments, refused_too.ok, refused_too.arguments) == (False, {}, False, {})
    told = f"the arguments for keep were over {MAX_ARGUMENT_CHARS:,} characters long; send less"
    assert tool_results(provider.requests[1]) == [("kept", False), (told, True), (told, True)]
    sent_back = provider.requests[1].messages[-2].tool_calls  # type: ignore[union-attr]
    assert [c.arguments for c in sent_back[1:]] == [{}, {}]


async def test_an_unexpected_model_call_fails_the_script(servers: Servers) -> None:
    with pytest.raises(ScriptError, match="unexpected model call #2"):
        await go(servers, [reply("", call("f__echo", text="x"))])


async def test_calls_that_change_things_run_in_the_models_order_even_when_one_waits_for_approval(
    servers: Servers,
) -> None:
    """slowpoke.delete_file needs an answer, f.mutate does not; on one server they still go in the model's order."""
    gate = anyio.Event()

    class SlowUser(ScriptedApprover):
        async def ask(self, spec: ToolSpec, arguments: Mapping[str, Any]) -> Verdict:
            await gate.wait()  # answer only once a heartbeat said we are waiting for the user
            return await super().ask(spec, arguments)

    recorder_gate = Recorder()

    async def emit(event: ev.Event) -> None:
        await recorder_gate(event)
        if isinstance(event, ev.Heartbeat) and event.waiting_for == "the user's answer":
            gate.set()

    box = Toolbox.build([], servers.values())
    trust = {"slowpoke.mutate": "always"}
    specs = tuple(dataclasses.replace(s, trust=trust.get(s.name, s.trust)) for s in box.select(["slowpoke.*"]))
    provider = ScriptedProvider(
        [reply("", call("slowpoke__delete_file", path="/a"), call("slowpoke__mutate", seconds=0)), reply("ok")]
    )
    request = RunRequest(task="t", mode="agent", tools=specs)
    await run(
        request,
        provider=provider,
        tools=ToolCaller(servers, []),
        emit=emit,
        approver=SlowUser(Verdict(True, "allowed once")),
        heartbeat_interval=0.05,
    )
    order = [
        (e.kind, e.name)
        for e in recorder_gate.events
        if e.kind in ("tool_call_started", "tool_call_finished", "approval_requested")
    ]
    assert order == [
        ("tool_call_started", "slowpoke.delete_file"),
        ("approval_requested", "slowpoke.delete_file"),
        ("tool_call_finished", "slowpoke.delete_file"),
        ("tool_call_started", "slowpoke.mutate"),
        ("tool_call_finished", "slowpoke.mutate"),
    ]
    assert any(isinstance(e, ev.Heartbeat) and e.waiting_for == "the user's answer" for e in recorder_gate.events)


async def test_a_schema_that_cannot_check_lets_the_child_answer(servers: Servers) -> None:
    box = Toolbox.build([], servers.values())
    echo = dataclasses.replace(
        box.by_name["f.echo"], input_schema={"type": "object", "properties": {"text": {"type": "any"}}}
    )
    provider = ScriptedProvider([reply("", call("f__echo", text="through")), reply("ok")])
    await run(RunRequest(task="t", mode="agent", tools=(echo,)), provider=provider, tools=ToolCaller(servers, []))
    assert tool_results(provider.requests[1]) == [("through", False)]


async def test_argument_checks_follow_a_tool_whose_schema_changed(servers: Servers) -> None:
    """One ArgumentCheck outlives runs (the engine keeps it): a child restarted with a new schema is checked against
    the new one, not the validator built for the old."""
    checks = ArgumentCheck()
    echo = Toolbox.build([], servers.values()).by_name["f.echo"]
    assert checks.problem(echo, {"text": "x"}) is None
    assert checks.problem(echo, {"text": 1}) == "text: 1 is not of type 'string'"
    renamed = {"type": "object", "properties": {"words": {"type": "string"}}, "required": ["words"]}
    changed = dataclasses.replace(echo, input_schema=renamed)
    assert checks.problem(changed, {"text": "x"}) == "'words' is a required property"
    assert checks.problem(changed, {"words": "x"}) is None


async def test_metrics_count_errors_by_category_and_time_per_tool(servers: Servers) -> None:
    script = [
        reply(
            "",
            call("f__echo", text="a"),
            call("f__echo", text=1),
            call("slowpoke__hang"),
            call("f__delete_file", path="/x"),
        ),
        reply("", call("f__echo", text="b")),
        reply("stopped"),
    ]
    result, _, _ = await go(servers, script, limits=Limits(max_steps=2))
    usage = result.usage
    assert usage.errors == {"tool": 1, "timeout": 1, "approval": 1, "limit": 1}
    assert set(usage.tool_ms) == {"f.echo", "slowpoke.hang", "f.delete_file"}
    assert usage.tool_ms["slowpoke.hang"] >= 500  # its timeout
    assert result.to_json()["usage"]["errors"] == usage.errors
    kinds = [c.error_kind for c in result.steps[0].tool_calls]
    assert kinds == [None, "tool", "timeout", "approval"]
    assert set(usage.errors) == set(get_args(ErrorKind))  # every category the result names is one a run can count


def test_the_result_schema_names_every_stop_reason_and_error_kind() -> None:
    """Hosts read the result through its schema: the stop reasons and error categories are enums there, taken from
    the types the loop fills in, so a new one cannot be left out of it."""
    schema = TypeAdapter(RunResult).json_schema()
    assert schema["properties"]["stop_reason"]["enum"] == list(get_args(StopReason))
    assert schema["$defs"]["RunUsage"]["properties"]["errors"]["propertyNames"]["enum"] == list(get_args(ErrorKind))
