"""A reader of our stdout or stderr that has gone (`meta-agent run ... 2>&1 | head -2`, a host that closes the stderr
of `serve`): what would have been written there is dropped, and nothing else changes. The tool call still succeeds,
the run finishes, its trace ends `run_finished`, and the exit status is the run's. Each case is a real pipe whose read
end is closed before meta-agent starts, so its first write there fails with EPIPE."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import TIME_COMMAND, openai_env
from fake_llm import FakeLLM, openai_reply
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

META_AGENT = [sys.executable, "-m", "meta_agent"]
TASK = "What time is it in Tokyo?"
ANSWER = "It is evening in Tokyo."


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": {"time": TIME_COMMAND}}))
    return path


@pytest.fixture
def closed_pipe() -> Iterator[int]:
    """The write end of a pipe whose read end is closed already: every write to it fails (EPIPE)."""
    read, write = os.pipe()
    os.close(read)
    yield write
    os.close(write)


def script_a_tool_call(llm: FakeLLM) -> None:
    llm.reply(openai_reply(None, ("c1", "time__get_current_time", {"timezone": "Asia/Tokyo"})))
    llm.reply(openai_reply(ANSWER))


def the_trace(trace_dir: Path) -> list[dict]:
    """The records of the one trace in `trace_dir`."""
    (trace,) = trace_dir.glob("*.jsonl")
    return [json.loads(line) for line in trace.read_text().splitlines()]


def assert_finished_with_the_tool_call(trace_dir: Path) -> None:
    records = the_trace(trace_dir)
    assert records[-1]["kind"] == "run_finished", [record["kind"] for record in records]
    (call,) = [record for record in records if record["kind"] == "tool_call_finished"]
    assert (call["name"], call["ok"], call["error"]) == ("time.get_current_time", True, None)


@pytest.mark.parametrize("closed", ["stderr", "stdout", "both"])
def test_a_closed_stream_costs_only_what_it_would_have_read(
    llm: FakeLLM, config: Path, tmp_path: Path, closed_pipe: int, closed: str
) -> None:
    script_a_tool_call(llm)
    traces = tmp_path / "traces"
    streams = {
        "stdout": closed_pipe if closed in ("stdout", "both") else subprocess.PIPE,
        "stderr": closed_pipe if closed in ("stderr", "both") else subprocess.PIPE,
    }
    result = subprocess.run(
        # debug: a log line at every turn, so stderr is written to all through the run
        [*META_AGENT, "run", TASK, "--config", str(config), "--log-level", "debug"],
        **streams,
        text=True,
        env=openai_env(llm, model="openai:fake-model", base=os.environ, META_AGENT_TRACE_DIR=str(traces)),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert_finished_with_the_tool_call(traces)
    if closed == "stderr":
        assert result.stdout == f"{ANSWER}\n"
    if closed == "stdout":
        assert "step 1 · time.get_current_time ok (" in result.stderr
        assert "done · final (2 model calls, 1 tool call)" in result.stderr
        for unwanted in ("Traceback", "BrokenPipe", "Exception ignored", "Broken pipe"):
            assert unwanted not in result.stderr


@pytest.mark.anyio
async def test_serve_outlives_a_closed_stderr(llm: FakeLLM, config: Path, tmp_path: Path, closed_pipe: int) -> None:
    """`serve` logs on stderr (here every line, at debug): a host that closed it still gets its answers."""
    traces = tmp_path / "traces"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "meta_agent", "serve", "--config", str(config), "--log-level", "debug"],
        env=openai_env(llm, model="openai:fake-model", base=os.environ, META_AGENT_TRACE_DIR=str(traces)),
    )
    with os.fdopen(os.dup(closed_pipe), "w") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            for _ in range(2):  # the second call: the server is still there after the first one's lines
                script_a_tool_call(llm)
                result = await client.call_tool("agent", {"task": TASK})
                assert not result.is_error, result.content
                assert result.content[0].text == ANSWER  # type: ignore[union-attr]
                assert result.structured_content and result.structured_content["stop_reason"] == "final"
    for trace in traces.glob("*.jsonl"):
        assert json.loads(trace.read_text().splitlines()[-1])["kind"] == "run_finished"
    assert len(list(traces.glob("*.jsonl"))) == 2
