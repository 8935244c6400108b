"""Run traces: real runs (the real openai SDK against a fake model, a real child) write real JSONL files; secrets from
the environment and from servers.json never appear in them; `meta-agent runs` reads them back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog
from conftest import fault_entry, openai_env
from fake_llm import FakeLLM, openai_reply
from ulid import ULID

from meta_agent.config.servers import ServerEntry
from meta_agent.config.settings import Settings
from meta_agent.core.events import LimitReached, RunFailed, RunStarted, ToolCallStarted
from meta_agent.engine import Engine
from meta_agent.records import trace_values
from meta_agent.records.trace_values import bounded
from meta_agent.records.traces import REDACTED, Redactor, TraceWriter, default_trace_dir, prune_traces

pytestmark = pytest.mark.anyio
PLANTED = {
    "api_key": "sk-planted-api-key-0123456789",
    "child_env": "child-env-secret-9876",
    "header": "header-token-5555",
}


async def traced_run(
    tmp_path: Path, llm: FakeLLM, *, internal_tools: str | None = None, **servers: ServerEntry
) -> tuple[Any, list[dict[str, Any]]]:
    settings = Settings(model="openai:fake-model", trace_dir=tmp_path, internal_tools=internal_tools)
    environ = openai_env(llm, OPENAI_API_KEY=PLANTED["api_key"])
    async with Engine(settings, servers or {"f": fault_entry()}, environ) as engine:
        result = await engine.run("echo something", mode="agent")
    trace = [json.loads(line) for line in (tmp_path / f"{result.run_id}.jsonl").read_text().splitlines()]
    return result, trace


async def test_a_trace_holds_the_whole_run(tmp_path: Path, llm: FakeLLM) -> None:
    llm.reply(openai_reply(None, ("c1", "f__huge", {"size": 120_000})))
    llm.reply(openai_reply("done", usage=(30, 3)))
    result, trace = await traced_run(tmp_path, llm)
    kinds = [record["kind"] for record in trace]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    assert trace[0]["run_id"] == result.run_id
    request = next(r for r in trace if r["kind"] == "model_requested")["request"]
    assert request["messages"][0]["parts"][0]["text"] == "echo something"
    assert {tool["name"] for tool in request["tools"]} >= {"f__echo", "f__huge"}  # the exact schemas sent
    echo = next(tool for tool in request["tools"] if tool["name"] == "f__echo")
    assert echo["parameters"]["properties"]["text"]["type"] == "string"
    response = next(r for r in trace if r["kind"] == "model_responded")["response"]
    assert response["tool_calls"][0]["arguments"] == {"size": 120_000}
    finished = next(r for r in trace if r["kind"] == "tool_call_finished")
    assert len(finished["full_result"][0]["text"]) == 120_000  # in full...
    seen = finished["result"][0]["text"]  # ...and as the model got it: its head, and the handle it was kept under
    assert f"[result-1@{result.run_id[-6:]}: 120,000 characters, 1 line; the first 4,000 are above" in seen
    assert trace[-1]["result"]["usage"]["model_calls"] == 2
    assert all("ts" in record for record in trace)


async def test_requests_are_traced_as_what_is_new_and_rebuild_in_full(tmp_path: Path, llm: FakeLLM) -> None:
    """Each model_requested record holds only the messages new since the last request (so a step costs the same at
    step 200 as at step 1); read in order, the records give every request whole."""
    llm.reply(openai_reply(None, ("c1", "f__echo", {"text": "one"})))
    llm.reply(openai_reply(None, ("c2", "f__echo", {"text": "two"})))
    llm.reply(openai_reply("done"))
    result, trace = await traced_run(tmp_path, llm)
    records = [r["request"] for r in trace if r["kind"] == "model_requested"]
    assert [r["messages_from"] for r in records] == [0, 1, 3]  # task; + call and result; + call and result
    assert "tools" in records[0] and all("tools" not in r for r in records[1:])  # schemas only when they change
    assert "system" in records[0] and all("system" not in r for r in records[1:])
    rebuilt: list[Any] = []
    for record in records:
        assert len(rebuilt) == record["messages_from"]
        rebuilt = rebuilt[: record["messages_from"]] + record["messages"]
    wire = llm.requests[-1].body["messages"]  # what the openai SDK sent last: system + the whole transcript
    assert len(rebuilt) == len(wire) - 1 == len(result.transcript) - 1
    assert [m["role"] for m in rebuilt] == ["user", "assistant", "tool", "assistant", "tool"]
    assert rebuilt[4]["results"][0]["parts"][0]["text"] == "two"


async def test_secrets_never_reach_a_trace(tmp_path: Path, llm: FakeLLM) -> None:
    """Plant secrets in the environment, a child's env and headers, and make the model and a tool repeat them."""
    llm.reply(
        openai_reply(
            f"the key is {PLANTED['api_key']}",
            ("c1", "f__echo", {"text": f"{PLANTED['child_env']} and Bearer {PLANTED['header']}"}),
        )
    )
    llm.reply(openai_reply(f"echoed {PLANTED['child_env']}"))
    child = fault_entry(env={"SOME_SETTING": PLANTED["child_env"]})
    web = ServerEntry(url="http://127.0.0.1:9/mcp", headers={"Authorization": f"Bearer {PLANTED['header']}"})
    result, _trace = await traced_run(tmp_path, llm, f=child, web=web)
    text = (tmp_path / f"{result.run_id}.jsonl").read_text()
    for secret in PLANTED.values():
        assert secret not in text
    assert REDACTED in text
    assert result.answer == f"echoed {PLANTED['child_env']}"  # redaction is the trace's, not the run's


def test_redaction_rules() -> None:
    redact = Redactor(["s3cr3t-value", "x"])  # too short to hide: "x"
    assert redact('{"a": "s3cr3t-value", "b": "x"}') == '{"a": "[redacted]", "b": "x"}'
    assert redact("Authorization: Bearer abc.def-123") == "Authorization: Bearer [redacted]"
    assert redact("BEARER abc.def-123 and bEaReR xyz.987") == "BEARER [redacted] and bEaReR [redacted]"
    assert redact("key sk-abcdefghijkl") == "key [redacted]"
    env = {"MY_API_KEY": "aaaa-bbbb", "GITHUB_TOKEN": "tok-1234", "HOME": "/root/home"}
    redact = Redactor.of(env, {})
    assert redact("aaaa-bbbb tok-1234 /root/home") == "[redacted] [redacted] /root/home"


async def test_a_trace_that_cannot_be_written_does_not_stop_the_run(tmp_path: Path, llm: FakeLLM) -> None:
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the trace directory should be")
    warnings: list[str] = []

    def watch(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
        warnings.append(event["event"])
        raise structlog.DropEvent

    llm.reply(openai_reply("fine anyway"))
    old = structlog.get_config()
    structlog.configure(processors=[watch])
    try:
        settings = Settings(model="openai:fake-model", trace_dir=blocked / "traces")
        async with Engine(settings, {}, openai_env(llm)) as engine:
            result = await engine.run("t", mode="agent")
    finally:
        structlog.configure(**old)
    assert result.answer == "fine anyway"
    assert warnings.count("trace_not_written") == 1


async def test_log_lines_of_a_run_carry_its_run_id(tmp_path: Path, llm: FakeLLM) -> None:
    seen: list[dict[str, Any]] = []

    def keep(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
        seen.append(dict(event))
        raise structlog.DropEvent

    llm.reply(openai_reply("ok"))
    old = structlog.get_config()
    structlog.configure(processors=[structlog.contextvars.merge_contextvars, keep])
    try:
        async with Engine(Settings(model="openai:fake-model", trace_dir=tmp_path), {}, openai_env(llm)) as engine:
            result = await engine.run("t", mode="agent")
    finally:
        structlog.configure(**old)
    of_run = [e for e in seen if e["event"] in ("run_started", "run_finished")]
    assert [e["run_id"] for e in of_run] == [result.run_id] * 2
    assert of_run[1]["stop_reason"] == "final"


@pytest.mark.skipif(sys.platform != "linux", reason="the XDG layout is Linux's; platformdirs knows the others")
@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"XDG_STATE_HOME": "/state", "HOME": "/home/u"}, "/state/meta-agent/traces"),
        ({"XDG_STATE_HOME": "", "HOME": "/home/u"}, "/home/u/.local/state/meta-agent/traces"),
        ({"HOME": "/home/u"}, "/home/u/.local/state/meta-agent/traces"),
    ],
)
def test_traces_go_to_the_user_state_dir(monkeypatch: pytest.MonkeyPatch, environ: dict, expected: str) -> None:
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert default_trace_dir() == Path(expected)


def test_old_traces_are_pruned(tmp_path: Path) -> None:
    old, new = tmp_path / "01OLD.jsonl", tmp_path / "01NEW.jsonl"
    old.write_text("{}\n")
    new.write_text("{}\n")
    os.utime(old, (0, 0))
    assert prune_traces(tmp_path, max_age_days=14) == 1
    assert not old.exists() and new.exists()


async def test_runs_lists_and_tells_a_run(tmp_path: Path, llm: FakeLLM) -> None:
    llm.reply(openai_reply(None, ("c1", "f__echo", {"text": "hello"})))
    llm.reply(openai_reply("It said hello."))
    result, _ = await traced_run(tmp_path, llm)
    env = {**os.environ, "META_AGENT_TRACE_DIR": str(tmp_path)}
    listing = subprocess.run([sys.executable, "-m", "meta_agent", "runs"], capture_output=True, text=True, env=env)
    row = listing.stdout.splitlines()[1].split()
    assert row[0] == result.run_id and row[2:5] == ["agent", "final", "2"]
    shown = subprocess.run(
        [sys.executable, "-m", "meta_agent", "runs", "show", result.run_id], capture_output=True, text=True, env=env
    )
    lines = shown.stdout.splitlines()
    assert lines[1] == "task: echo something"
    assert '  asked for: f.echo {"text": "hello"}' in lines
    assert "  returned: hello" in lines
    assert "answer: It said hello." in lines
    assert lines[-1].startswith("where time went: model ") and "f.echo" in lines[-1]
    missing = subprocess.run(
        [sys.executable, "-m", "meta_agent", "runs", "show", "../../etc/passwd"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert missing.returncode == 2 and missing.stderr.startswith("meta-agent: runs: no trace of run")


MAX_VALUE_BYTES = 1_000_000  # the README's 1 MB (Traces, logs and metrics)


def strings_in(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)


async def test_no_value_of_a_trace_is_stored_over_1_mb(tmp_path: Path, llm: FakeLLM) -> None:
    """The model sends a 5,000,000-character argument (some of it 2-byte UTF-8), which the tool echoes: each record
    holding it keeps its first MB and a marker giving its length, but for the tool's whole result, which the run kept
    for read_result and the trace keeps as it is; `meta-agent runs show` still reads the trace."""
    big = ("é" + "x" * 9) * 500_000
    llm.reply(openai_reply(None, ("c1", "f__echo", {"text": big})))
    llm.reply(openai_reply("done"))
    result, trace = await traced_run(tmp_path, llm)
    assert result.answer == "done"
    cut_to_size = [{k: v for k, v in record.items() if k != "full_result"} for record in trace]
    sizes = [
        len(json.dumps(text, ensure_ascii=False).encode()) - 2 for record in cut_to_size for text in strings_in(record)
    ]
    assert max(sizes) <= MAX_VALUE_BYTES
    marker = " [cut: 5,000,000 characters in all]"
    asked = next(r for r in trace if r["kind"] == "tool_call_started")["arguments"]["text"]
    assert asked.endswith(marker) and big.startswith(asked.removesuffix(marker))
    assert len(asked.encode()) > MAX_VALUE_BYTES - 1000  # as much as fits is kept
    finished = next(r for r in trace if r["kind"] == "tool_call_finished")
    assert finished["full_result"][0]["text"] == big
    seen = finished["result"][0]["text"]  # what the model got: the head, and the handle of the whole result
    assert f"[result-1@{result.run_id[-6:]}: 5,000,000 characters, 1 line;" in seen
    env = {**os.environ, "META_AGENT_TRACE_DIR": str(tmp_path)}
    command = [sys.executable, "-m", "meta_agent", "runs", "show", result.run_id]
    shown = subprocess.run(command, capture_output=True, text=True, env=env)
    assert shown.returncode == 0 and shown.stderr == "", shown.stderr
    assert any(line.startswith('  asked for: f.echo {"text": "éxxxxxxxxxéxxx') for line in shown.stdout.splitlines())


async def test_a_whole_result_nothing_keeps_is_cut_like_any_value(tmp_path: Path, llm: FakeLLM) -> None:
    """Without read_result (no internal tools) no result is kept whole: a child's 3 MB result is cut in the trace."""
    llm.reply(openai_reply(None, ("c1", "f__huge", {"size": 3_000_000})))
    llm.reply(openai_reply("done"))
    _result, trace = await traced_run(tmp_path, llm, internal_tools="")
    finished = next(r for r in trace if r["kind"] == "tool_call_finished")
    assert finished["kept"] is None
    assert finished["full_result"][0]["text"].endswith(" [cut: 3,000,000 characters in all]")


def test_a_long_value_is_cut_without_encoding_it_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cutting a 100 MB value encodes its first MB only (json.dumps never sees more), and the secret the cut would
    split is redacted whole."""
    secret = "planted-secret-0123456789"
    cut_at = MAX_VALUE_BYTES - len(" [cut: 100,000,000 characters in all]")
    text = "a" * (cut_at - 10) + secret + "b" * (100_000_000 - cut_at - len(secret) + 10)
    encoded: list[int] = []
    dumps = trace_values.json.dumps

    def measured(value: Any, **options: Any) -> str:
        encoded.append(len(value))
        return dumps(value, **options)

    monkeypatch.setattr(trace_values.json, "dumps", measured)
    record = bounded({"arguments": {"text": text}}, Redactor([secret]))
    kept = record["arguments"]["text"]
    assert kept.endswith(" [cut: 100,000,000 characters in all]") and len(kept.encode()) <= MAX_VALUE_BYTES
    assert "planted" not in kept and REDACTED in kept
    assert encoded and max(encoded) <= 2 * MAX_VALUE_BYTES


# -- the writer thread and the lock of a live trace -------------------------------------------------------------------

STALL_BOUND = 10.0  # on a regression the event loop itself is stuck in open(): a timer thread ends the stall then


def started(run_id: str) -> RunStarted:
    return RunStarted(run_id=run_id, mode="agent", task="t", model="m", tools=())


async def test_a_stalled_disk_never_blocks_a_run(tmp_path: Path) -> None:
    """The trace is a FIFO nobody reads yet, so opening it blocks: every event is still handed over at once, and
    once the disk moves again the trace arrives whole and in order before `aclose` returns."""
    run_id = str(ULID())
    fifo = tmp_path / f"{run_id}.jsonl"
    os.mkfifo(fifo)
    opened, received = threading.Event(), bytearray()

    def read() -> None:
        with fifo.open("rb") as file:
            opened.set()
            received.extend(file.read())

    unstall = threading.Timer(STALL_BOUND, read)
    unstall.start()
    reader = threading.Thread(target=read)
    writer = TraceWriter(tmp_path, Redactor([]))
    events = [started(run_id), LimitReached(step=1, limit="max_steps"), RunFailed(run_id=run_id, error="down")]
    try:
        for event in events:
            await writer(event)
        assert not opened.is_set(), "an event waited for the disk"
        unstall.cancel()
        reader.start()
        with anyio.fail_after(STALL_BOUND):
            await writer.aclose()
        # aclose returned once the writer had closed its end (the reader's open may not have returned yet: no
        # look at `opened` here), so the reader reaches the end of the trace
        await anyio.to_thread.run_sync(reader.join, STALL_BOUND)
        assert not reader.is_alive()
    finally:
        unstall.cancel()
        if not opened.is_set():  # free the writer thread, which waits for a reader of the FIFO
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        if reader.ident is not None:
            await anyio.to_thread.run_sync(reader.join, STALL_BOUND)
    assert [json.loads(line)["kind"] for line in received.splitlines()] == [event.kind for event in events]


async def test_a_trace_a_live_run_writes_is_not_pruned(tmp_path: Path) -> None:
    run_id = str(ULID())
    writer = TraceWriter(tmp_path, Redactor([]))
    await writer(started(run_id))
    path = tmp_path / f"{run_id}.jsonl"
    with anyio.fail_after(STALL_BOUND):
        while not (path.exists() and path.read_text()):
            await anyio.sleep(0.01)
    os.utime(path, (0, 0))  # as old as it gets, but its run is live
    assert prune_traces(tmp_path, max_age_days=14) == 0 and path.exists()
    await writer(RunFailed(run_id=run_id, error="down"))
    await writer.aclose()
    os.utime(path, (0, 0))
    assert prune_traces(tmp_path, max_age_days=14) == 1 and not path.exists()


async def test_a_lone_surrogate_is_traced_not_the_end_of_the_trace(tmp_path: Path) -> None:
    """JSON may carry "\\ud800", which Python decodes to a str that UTF-8 cannot encode."""
    run_id = str(ULID())
    writer = TraceWriter(tmp_path, Redactor([]))
    await writer(started(run_id))
    await writer(ToolCallStarted(step=1, call_id="c1", name="f.echo", arguments={"text": "a\ud800b"}))
    await writer(RunFailed(run_id=run_id, error="down"))
    await writer.aclose()
    records = [json.loads(line) for line in (tmp_path / f"{run_id}.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in records] == ["run_started", "tool_call_started", "run_failed"]
    assert records[1]["arguments"] == {"text": "a\ud800b"}
