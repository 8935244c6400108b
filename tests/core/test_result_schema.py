"""The run's result has one definition (core/result.py): the loop's `RunResult` is what hosts get. Its output schema
and its JSON are pinned to what hosts got while a second set of pydantic models (RunOut...) described them: the same
schema, the same JSON, key for key; and a result DBOS pickled before still loads.

fixtures/run_result_schema.json is the output schema `ask`, `plan` and `agent` advertised then, as the SDK sent it.
Only the names of its definitions change, with their titles: each is now the loop's own class."""

from __future__ import annotations

import base64
import dataclasses
import json
import pickle
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from mcp import Client
from pydantic import TypeAdapter

from meta_agent.config.settings import Settings
from meta_agent.core.messages import (
    AssistantMessage,
    ImagePart,
    TextPart,
    ToolCall,
    ToolMessage,
    ToolResult,
    UserMessage,
)
from meta_agent.core.result import RunResult, RunUsage, StepRecord, ToolCallRecord, UnavailableServer
from meta_agent.front.server import build_server

pytestmark = [pytest.mark.anyio, pytest.mark.quick]

SCHEMA_BEFORE = Path(__file__).parents[1] / "fixtures" / "run_result_schema.json"
RENAMED = {  # the models of before -> the classes that are now the one definition
    "RunOut": "RunResult",
    "StepOut": "StepRecord",
    "ToolCallOut": "ToolCallRecord",
    "UsageOut": "RunUsage",
    "UnavailableServerOut": "UnavailableServer",
}


# Optional fields added since, by definition: a host of before reads a result as it did.
ADDED: dict[str, dict[str, Any]] = {
    "ToolCallRecord": {
        "via": {
            "anyOf": [{"type": "string"}, {"type": "null"}],
            "default": None,
            "description": "The tool whose program made this call (run_code).",
            "title": "Via",
        }
    }
}


def schema_before() -> dict[str, Any]:
    """The advertised schema of before, its definitions (keys, references, titles) given today's names, with the
    optional fields added since."""
    text = SCHEMA_BEFORE.read_text()
    for old, new in RENAMED.items():
        text = text.replace(f'"{old}"', f'"{new}"').replace(f'"#/$defs/{old}"', f'"#/$defs/{new}"')
    schema: dict[str, Any] = json.loads(text)
    for definition, fields in ADDED.items():
        schema["$defs"][definition]["properties"].update(fields)
    return schema


def full_result() -> RunResult:
    """A result with every field set, the hidden ones too."""
    call = ToolCall(id="c1", name="f__echo", arguments={"text": "hi"})
    return RunResult(
        answer="It said hi.",
        stop_reason="final",
        run_id="01ARZ3NDEKTSV4RRFFQ69G5FAV",
        conversation_id="conv-1",
        conversation_trimmed=2,
        conversation_error="disk full",
        unavailable_servers=(UnavailableServer(server="time", status="failed", reason="command not found: uvx"),),
        steps=(
            StepRecord(
                index=1,
                tool_calls=(
                    ToolCallRecord(name="f.echo", arguments={"text": "hi"}, ok=True, duration_ms=3),
                    ToolCallRecord(
                        name="f.fail", arguments={}, ok=False, duration_ms=1, error="boom", error_kind="tool"
                    ),
                ),
            ),
            StepRecord(index=2, tool_calls=()),
        ),
        usage=RunUsage(
            model_calls=2,
            tool_calls=2,
            input_tokens=30,
            output_tokens=9,
            reasoning_tokens=4,
            duration_ms=120,
            models={"openai:m": 2},
            tool_ms={"f.echo": 3, "f.fail": 1},
            errors={"tool": 1},
        ),
        images=(ImagePart(data="aGk=", mime_type="image/png"),),
        transcript=(
            UserMessage.of("echo hi"),
            AssistantMessage(tool_calls=(call,)),
            ToolMessage(results=(ToolResult(call_id="c1", name="f__echo", parts=(TextPart(text="hi"),)),)),
            AssistantMessage(text="It said hi."),
        ),
    )


def test_the_output_schema_is_the_one_hosts_were_advertised() -> None:
    assert TypeAdapter(RunResult).json_schema() == schema_before()


async def test_ask_plan_and_agent_advertise_the_results_own_schema() -> None:
    """The SDK's output model is RunResult's own schema: the descriptions, the fields hosts never get (transcript,
    images, error_kind) left out, and no default where the loop always fills a field in."""
    server = build_server(Settings(model="openai:fake-model"), {}, {"OPENAI_API_KEY": "sk-test"})
    async with Client(server) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    expected = schema_before()
    for name in ("ask", "plan", "agent"):
        assert tools[name].output_schema == expected, name


# What RunOut dumped of `full_result()` (but its conversation_error), key for key and in this order.
JSON_BEFORE = (
    '{"answer": "It said hi.", "stop_reason": "final", "run_id": "01ARZ3NDEKTSV4RRFFQ69G5FAV", "conversation_id": '
    '"conv-1", "conversation_trimmed": 2, "unavailable_servers": [{"server": "time", "status": "failed", "reason": '
    '"command not found: uvx"}], "steps": [{"index": 1, "tool_calls": [{"name": "f.echo", "arguments": {"text": '
    '"hi"}, "ok": true, "duration_ms": 3}, {"name": "f.fail", "arguments": {}, "ok": false, "duration_ms": 1, '
    '"error": "boom"}]}, {"index": 2, "tool_calls": []}], "usage": {"model_calls": 2, "tool_calls": 2, '
    '"input_tokens": 30, "output_tokens": 9, "reasoning_tokens": 4, "duration_ms": 120, "models": {"openai:m": 2}, '
    '"tool_ms": {"f.echo": 3, "f.fail": 1}, "errors": {"tool": 1}}}'
)


def test_a_results_json_is_what_hosts_got_before() -> None:
    data = full_result().to_json()
    assert data.pop("conversation_error") == "disk full"
    assert json.dumps(data) == JSON_BEFORE


def test_empty_optional_fields_are_left_out_and_hidden_ones_never_sent() -> None:
    empty = RunResult(
        answer="a",
        stop_reason="final",
        run_id="r",
        steps=(StepRecord(index=1, tool_calls=(ToolCallRecord(name="f.x", arguments={}, ok=True, duration_ms=1),)),),
        usage=RunUsage(model_calls=1, tool_calls=1, input_tokens=1, output_tokens=1),
        transcript=(UserMessage.of("a"),),
    )
    assert empty.to_json() == {
        "answer": "a",
        "stop_reason": "final",
        "run_id": "r",
        "conversation_id": None,
        "steps": [{"index": 1, "tool_calls": [{"name": "f.x", "arguments": {}, "ok": True, "duration_ms": 1}]}],
        "usage": {
            "model_calls": 1,
            "tool_calls": 1,
            "input_tokens": 1,
            "output_tokens": 1,
            "duration_ms": 0,
            "models": {},
            "tool_ms": {},
            "errors": {},
        },
    }


def test_the_json_and_the_schema_name_the_same_fields() -> None:
    """Every field the schema names is in the JSON of a full result, and nothing else is; the JSON is valid."""
    schema = TypeAdapter(RunResult).json_schema()
    full = full_result()
    [step, _] = full.steps
    made_by_code = dataclasses.replace(step.tool_calls[1], via="run_code")  # a field added since
    full = dataclasses.replace(full, steps=(dataclasses.replace(step, tool_calls=(step.tool_calls[0], made_by_code)),))
    data = full.to_json()
    jsonschema.validate(data, schema)
    definitions = schema["$defs"]
    assert set(data) == set(schema["properties"])
    assert set(data["usage"]) == set(definitions["RunUsage"]["properties"])
    assert set(data["steps"][0]) == set(definitions["StepRecord"]["properties"])
    assert set(data["steps"][0]["tool_calls"][1]) == set(definitions["ToolCallRecord"]["properties"])
    assert set(data["unavailable_servers"][0]) == set(definitions["UnavailableServer"]["properties"])


# `full_result()` but its conversation_error, pickled (as DBOS records a durable run's result) by the version whose
# result had a second definition for hosts.
PICKLED_BEFORE = (
    "gASV3wQAAAAAAACMFm1ldGFfYWdlbnQuY29yZS5yZXN1bHSUjAlSdW5SZXN1bHSUk5QpgZR9lCiMBmFuc3dlcpSMC0l0IHNhaWQgaGkulIwLc3"
    "RvcF9yZWFzb26UjAVmaW5hbJSMBnJ1bl9pZJSMGjAxQVJaM05ERUtUU1Y0UlJGRlE2OUc1RkFWlIwFc3RlcHOUaACMClN0ZXBSZWNvcmSUk5Qp"
    "gZR9lCiMBWluZGV4lEsBjAp0b29sX2NhbGxzlGgAjA5Ub29sQ2FsbFJlY29yZJSTlCmBlH2UKIwEbmFtZZSMBmYuZWNob5SMCWFyZ3VtZW50c5"
    "R9lIwEdGV4dJSMAmhplHOMAm9rlIiMC2R1cmF0aW9uX21zlEsDjAVlcnJvcpROjAplcnJvcl9raW5klE51YmgTKYGUfZQoaBaMBmYuZmFpbJRo"
    "GH2UaByJaB1LAWgejARib29tlGgfjAR0b29slHVihpR1YmgNKYGUfZQoaBBLAmgRKXVihpSMBXVzYWdllGgAjAhSdW5Vc2FnZZSTlCmBlH2UKI"
    "wLbW9kZWxfY2FsbHOUSwJoEUsCjAxpbnB1dF90b2tlbnOUSx6MDW91dHB1dF90b2tlbnOUSwmMEHJlYXNvbmluZ190b2tlbnOUSwRoHUt4jAZt"
    "b2RlbHOUfZSMCG9wZW5haTptlEsCc4wHdG9vbF9tc5R9lChoF0sDaCJLAXWMBmVycm9yc5R9lGglSwFzdWKMBmltYWdlc5SMGG1ldGFfYWdlbn"
    "QuY29yZS5tZXNzYWdlc5SMCUltYWdlUGFydJSTlCmBlH2UKIwEZGF0YZSMBGFHaz2UjAltaW1lX3R5cGWUjAlpbWFnZS9wbmeUjARraW5klIwF"
    "aW1hZ2WUdWKFlIwPY29udmVyc2F0aW9uX2lklIwGY29udi0xlIwUY29udmVyc2F0aW9uX3RyaW1tZWSUSwKMEmNvbnZlcnNhdGlvbl9lcnJvcp"
    "ROjBN1bmF2YWlsYWJsZV9zZXJ2ZXJzlGgAjBFVbmF2YWlsYWJsZVNlcnZlcpSTlCmBlH2UKIwGc2VydmVylIwEdGltZZSMBnN0YXR1c5SMBmZh"
    "aWxlZJSMBnJlYXNvbpSMFmNvbW1hbmQgbm90IGZvdW5kOiB1dniUdWKFlIwKdHJhbnNjcmlwdJQoaDuMC1VzZXJNZXNzYWdllJOUKYGUfZQojA"
    "VwYXJ0c5RoO4wIVGV4dFBhcnSUk5QpgZR9lChoGowHZWNobyBoaZRoRGgadWKFlIwEcm9sZZSMBHVzZXKUdWJoO4wQQXNzaXN0YW50TWVzc2Fn"
    "ZZSTlCmBlH2UKGgajACUaBFoO4wIVG9vbENhbGyUk5QpgZR9lCiMAmlklIwCYzGUaBaMB2ZfX2VjaG+UaBh9lGgaaBtzjBFpbnZhbGlkX2FyZ3"
    "VtZW50c5ROdWKFlIwIdGhpbmtpbmeUKWhjjAlhc3Npc3RhbnSUdWJoO4wLVG9vbE1lc3NhZ2WUk5QpgZR9lCiMB3Jlc3VsdHOUaDuMClRvb2xS"
    "ZXN1bHSUk5QpgZR9lCiMB2NhbGxfaWSUaG9oFmhwaFxoXimBlH2UKGgaaBtoRGgadWKFlIwIaXNfZXJyb3KUiXVihZRoY2gldWJoZimBlH2UKG"
    "gaaAZoESlodCloY2h1dWJ0lHViLg=="
)


def test_a_result_pickled_before_still_loads() -> None:
    """A durable run's result recorded before the change still loads, whole, and dumps as it did."""
    loaded = pickle.loads(base64.b64decode(PICKLED_BEFORE))
    assert loaded == dataclasses.replace(full_result(), conversation_error=None)
    assert json.dumps(loaded.to_json()) == JSON_BEFORE
