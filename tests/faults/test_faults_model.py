"""The fault suite: a model endpoint that answers with status 200 but not in its wire format, and a model that sends
tool arguments nested far too deep, through the real front (`build_server` driven by the SDK's `Client` in memory)
with the real openai and anthropic SDKs against the fake endpoint.

Wrong shapes are seeded changes of a valid answer (a field taken away, or given a value of the wrong type): each
ends its run with stop reason `error` and a one-line error that names the field and the run. Deep arguments (as JSON
text, or as an object in the answer) are an error the model sees, and the run goes on to its answer. Nothing may
end up in the catch-alls for our own bugs (the harness's `group` checks it).
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import mcp.types as t
import pytest
from conftest import fault_entry
from fake_llm import FakeLLM, anthropic_reply, openai_reply
from fault_harness import (  # noqa: F401  (this module's fixtures)
    MODEL,
    call,
    clean_error,
    finished,
    group,
    injecting,
    log_to_a_list,
    serving,
)
from fault_tally import TALLY
from mcp import Client

from meta_agent.config.settings import Settings
from meta_agent.core.messages import MAX_ARGUMENT_DEPTH
from meta_agent.front.server import build_server

pytestmark = pytest.mark.anyio

CATEGORY = "model_bad_shape"
GROUPS = {"model_bad_shape_openai", "model_bad_shape_anthropic", "model_deep_arguments"}
TALLY.expected_groups |= GROUPS

ANTHROPIC = "anthropic:claude-sonnet-5-5"
GONE = object()  # a mutation that takes the field away
SHAPE_INJECTIONS = 24
DEEP_INJECTIONS = 16
# Python's JSON reader stops near 1000 levels less the stack in use: an object in the answer deeper than this
# cannot be read at all (text arguments can be any depth).
READABLE_DEPTH = 600
REFUSED = f"nested more than {MAX_ARGUMENT_DEPTH} levels deep; send a JSON object"

FieldPath = tuple[str | int, ...]

# A change of a valid answer: where, and the value put there (GONE: taken away). Only changes the wire format does
# not allow; what servers legitimately vary (content null, no usage, no call id) is tested in test_providers.
OPENAI_CHANGES: list[tuple[FieldPath, Any]] = [
    (("choices",), GONE),
    (("choices",), []),
    (("choices",), {"index": 0}),
    (("choices",), "none"),
    (("choices", 0), None),
    (("choices", 0), "a choice"),
    (("choices", 0, "message"), GONE),
    (("choices", 0, "message"), None),
    (("choices", 0, "message"), ["hi"]),
    (("choices", 0, "message", "content"), 5),
    (("choices", 0, "message", "content"), {"text": "hi"}),
    (("choices", 0, "message", "tool_calls"), {"id": "c1"}),
    (("choices", 0, "message", "tool_calls", 0), "a call"),
    (("choices", 0, "message", "tool_calls", 0, "function"), GONE),
    (("choices", 0, "message", "tool_calls", 0, "function", "name"), GONE),
    (("choices", 0, "message", "tool_calls", 0, "function", "name"), 7),
    (("choices", 0, "message", "tool_calls", 0, "function", "arguments"), [1, 2]),
    (("choices", 0, "message", "tool_calls", 0, "id"), 12),
    (("usage",), "lots"),
    (("usage", "prompt_tokens"), "12"),
    (("usage", "completion_tokens"), -1),
    (("usage", "prompt_tokens"), 1.5),
]
ANTHROPIC_CHANGES: list[tuple[FieldPath, Any]] = [
    (("content",), GONE),
    (("content",), "not blocks"),
    (("content",), {"type": "text", "text": "hi"}),
    (("content", 0), None),
    (("content", 0), "a block"),
    (("content", 0, "type"), GONE),
    (("content", 0, "type"), 3),
    (("content", 0, "text"), GONE),
    (("content", 0, "text"), ["hi"]),
    (("content", 1, "id"), GONE),
    (("content", 1, "name"), None),
    (("usage",), [20, 9]),
    (("usage", "output_tokens"), "9"),
    (("usage", "input_tokens"), -20),
]


def _openai_answer() -> dict[str, Any]:
    return openai_reply("checking", ("c1", "f__echo", {"text": "hi"}))


def _anthropic_answer() -> dict[str, Any]:
    return anthropic_reply(
        {"type": "text", "text": "checking"}, {"type": "tool_use", "id": "t1", "name": "f__echo", "input": {}}
    )


def _changed(answer: dict[str, Any], path: FieldPath, value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(answer)
    parent = changed
    for key in path[:-1]:
        parent = parent[key]
    if value is GONE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return changed


def _named(path: FieldPath) -> str:
    """The field as an error names it: choices[0].message."""
    return "".join(f"[{key}]" if isinstance(key, int) else f".{key}" for key in path).lstrip(".")


@asynccontextmanager
async def serving_anthropic(llm: FakeLLM) -> AsyncIterator[Client]:
    """Our front with the Anthropic adapter as its model, on a 2025-11-25 session."""
    environ = {"ANTHROPIC_BASE_URL": llm.url, "ANTHROPIC_API_KEY": "sk-ant-test"}
    async with Client(build_server(Settings(model=ANTHROPIC), {}, environ), mode="legacy") as client:
        yield client


@asynccontextmanager
async def serving_openai(llm: FakeLLM) -> AsyncIterator[Client]:
    """Our front with the OpenAI adapter as its model and fault_server as child f, on a 2026-07-28 connection."""
    async with serving(llm, {"f": fault_entry()}, mode="auto") as (client, _engine):
        yield client


def failed_naming_the_run(result: t.CallToolResult) -> str:
    """The one-line error of a run that ended with stop reason error, without its run id."""
    text = clean_error(result)
    structured = result.structured_content or {}
    assert structured.get("stop_reason") == "error", structured
    suffix = f" (run_id {structured['run_id']})"
    assert text.endswith(suffix), text
    return text.removesuffix(suffix)


async def _wrong_shapes(llm: FakeLLM, vendor: str) -> None:
    """Seeded changes of a valid answer, each a run that ends with a one-line error naming the field."""
    rng = random.Random(f"{CATEGORY}-{vendor}")
    changes, answer, spec = (
        (ANTHROPIC_CHANGES, _anthropic_answer(), ANTHROPIC)
        if vendor == "anthropic"
        else (OPENAI_CHANGES, _openai_answer(), MODEL)
    )
    picks = [*changes, *(rng.choice(changes) for _ in range(SHAPE_INJECTIONS - len(changes)))]
    rng.shuffle(picks)
    serve = serving_anthropic if vendor == "anthropic" else serving_openai
    async with group(f"model_bad_shape_{vendor}", CATEGORY), serve(llm) as client:
        for i, (path, value) in enumerate(picks):
            tag = f"[shape-{vendor}-{i}]"
            llm.reply(_changed(answer, path, value), match=tag)
            async with injecting(CATEGORY) as faults:
                error = failed_naming_the_run(await call(client, "agent", {"task": tag}))
                assert error.startswith(f"{spec}: the provider's answer was malformed: "), error
                assert _named(path) in error, (path, error)
                faults.handled()
            llm.clear()


async def test_openai_answers_of_the_wrong_shape(llm: FakeLLM) -> None:
    await _wrong_shapes(llm, "openai")


async def test_anthropic_answers_of_the_wrong_shape(llm: FakeLLM) -> None:
    await _wrong_shapes(llm, "anthropic")


def _nested(depth: int) -> str:
    """JSON text of arguments `depth` levels deep (the arguments object is the first)."""
    return '{"text": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"


def _deep_answer(rng: random.Random, depth: int) -> tuple[bytes, str]:
    """An OpenAI answer (as bytes: too deep for the fake endpoint's own JSON writer) calling f__echo with arguments
    `depth` deep, as JSON text or, where it can be read, as an object; and which it was."""
    form = "object" if depth <= READABLE_DEPTH and rng.random() < 0.5 else "text"
    arguments = _nested(depth) if form == "object" else json.dumps(_nested(depth))
    answer = json.dumps(openai_reply(None, ("c1", "f__echo", "ARGUMENTS"), ("c2", "f__echo", {"text": "fine"})))
    return answer.replace('"ARGUMENTS"', arguments).encode(), form


async def test_tool_arguments_nested_too_deep(llm: FakeLLM) -> None:
    """Seeded depths from one past the bound to tens of thousands: the deep call is an error the model sees, the
    call beside it runs, and the run answers."""
    rng = random.Random(CATEGORY)
    depths = [MAX_ARGUMENT_DEPTH + 1, READABLE_DEPTH, 50_000]
    depths += [rng.randint(MAX_ARGUMENT_DEPTH + 1, 20_000) for _ in range(DEEP_INJECTIONS - len(depths))]
    async with group("model_deep_arguments", CATEGORY), serving_openai(llm) as client:
        for i, depth in enumerate(depths):
            tag = f"[deep-{i}]"
            raw, form = _deep_answer(rng, depth)
            llm.reply_raw(raw, match=tag)
            llm.reply(openai_reply(f"went on {i}"), match=tag)
            async with injecting(CATEGORY) as faults:
                structured = finished(await call(client, "agent", {"task": tag}))
                assert structured["answer"] == f"went on {i}"
                deep, fine = structured["steps"][0]["tool_calls"]
                refused = f"the arguments for f__echo were {REFUSED}"
                assert (deep["arguments"], deep["ok"], deep["error"]) == ({}, False, refused), (depth, form)
                assert (fine["arguments"], fine["ok"]) == ({"text": "fine"}, True)
                faults.handled()
            llm.clear()


async def test_an_answer_nested_too_deep_to_read_is_a_one_line_error(llm: FakeLLM) -> None:
    """Arguments as an object deeper than any JSON reader here goes: the answer itself cannot be read (outside the
    counts: one case)."""
    raw = json.dumps(openai_reply(None, ("c1", "f__echo", "ARGUMENTS"))).replace('"ARGUMENTS"', _nested(50_000))
    async with serving_openai(llm) as client:
        llm.reply_raw(raw.encode(), match="[unreadable]")
        error = failed_naming_the_run(await call(client, "agent", {"task": "[unreadable]"}))
        llm.clear()
    assert error == f"{MODEL}: the provider's answer was malformed: nested too deeply to read"
