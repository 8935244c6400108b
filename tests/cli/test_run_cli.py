"""`meta-agent run` as a user runs it: a real subprocess, real children, the real openai SDK against a fake model."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import FAULT_SERVER, TIME_COMMAND, free_port, openai_env, processes_with
from fake_llm import FakeLLM, error_body, openai_reply

META_AGENT = [sys.executable, "-m", "meta_agent"]


@pytest.fixture
def marker() -> str:
    return f"marker-{uuid.uuid4().hex}"


@pytest.fixture
def config(tmp_path: Path, marker: str) -> Path:
    path = tmp_path / "servers.json"
    fault = {"command": sys.executable, "args": [str(FAULT_SERVER), "--name", marker]}
    path.write_text(json.dumps({"mcpServers": {"time": TIME_COMMAND, "f": fault}}))
    return path


def run(config: Path, environ: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*META_AGENT, "run", *args, "--config", str(config)], capture_output=True, text=True, env=environ, timeout=120
    )


def test_the_answer_on_stdout_and_the_steps_on_stderr(llm: FakeLLM, config: Path, marker: str) -> None:
    llm.reply(openai_reply(None, ("c1", "time__get_current_time", {"timezone": "Asia/Tokyo"})))
    llm.reply(openai_reply("It is evening in Tokyo."))
    result = run(config, openai_env(llm, model="openai:fake-model", base=os.environ), "What time is it in Tokyo?")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "It is evening in Tokyo.\n"
    lines = result.stderr.splitlines()
    assert re.fullmatch(r"start · run [0-9A-Z]{26} · agent with openai:fake-model · \d+ tools", lines[0]), lines[0]
    assert lines[1:3] == ["step 1 · model", 'step 1 · call time.get_current_time {"timezone": "Asia/Tokyo"}']
    assert lines[3].startswith("step 1 · time.get_current_time ok (")
    assert lines[4:] == ["step 2 · model", "done · final (2 model calls, 1 tool call)"]
    assert processes_with(marker) == []


def test_json_and_plan_mode(llm: FakeLLM, config: Path) -> None:
    llm.reply(openai_reply("1. Ask the clock.\n2. Tell the user."))
    result = run(
        config,
        openai_env(llm, model="openai:fake-model", base=os.environ),
        "plan the time check",
        "--mode",
        "plan",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    structured = json.loads(result.stdout)
    assert structured["answer"] == "1. Ask the clock.\n2. Tell the user."
    assert structured["stop_reason"] == "final"
    assert structured["usage"]["model_calls"] == 1
    offered = {tool["function"]["name"] for tool in llm.requests[0].body["tools"]}
    assert "f__delete_file" not in offered and "time__get_current_time" in offered


def test_the_step_limit(llm: FakeLLM, config: Path) -> None:
    llm.reply(openai_reply(None, ("c1", "f__echo", {"text": "again"})))
    llm.reply(openai_reply("Stopped after one step."))
    result = run(
        config, openai_env(llm, model="openai:fake-model", base=os.environ), "loop", "--max-steps", "1", "--json"
    )
    assert json.loads(result.stdout)["stop_reason"] == "max_steps"
    lines = result.stderr.splitlines()
    assert lines[-3:] == [
        "step 1 · limit max_steps: asking for a final answer",
        "step 2 · model (last turn, no tools)",
        "done · max_steps (2 model calls, 1 tool call)",
    ]
    assert llm.requests[-1].body["tool_choice"] == "none"
    told = llm.requests[-1].body["messages"][-1]["content"]  # the last turn's instruction, in good English
    assert "the step limit (1 step) was reached" in told, told


@pytest.mark.parametrize(
    ("extra_env", "args", "code", "message"),
    [
        ({"META_AGENT_MODEL": ""}, [], 2, "meta-agent: no model is configured: set META_AGENT_MODEL"),
        ({}, ["--tools", "nope.*"], 2, "meta-agent: tools: pattern 'nope.*' matches no tool"),
        (  # a tool's own name, without its server's: the line says how tools are named (and, once the time child is
            # up, which tool it likely meant: the children start a second after the command, whatever it needs)
            {},
            ["--tools", "get_current_time"],
            2,
            "matches no tool (a server's tools are named SERVER.TOOL, as `meta-agent tools` lists them",
        ),
        ({}, ["--allow", "nope.*"], 2, "meta-agent: allow: pattern 'nope.*' matches no tool"),
        (  # a misspelt server: every child started, for the line to name the real tools and what was meant
            {},
            ["--tools", "tme.*"],
            2,
            "meta-agent: tools: pattern 'tme.*' matches no tool (did you mean 'time.*'? the tools are: describe_image,"
            " read_result, time.get_current_time, time.convert_time, f.",
        ),
        ({}, ["--allow", "tme.*"], 2, "meta-agent: allow: pattern 'tme.*' matches no tool (did you mean 'time.*'?"),
        ({}, ["--allow", "f.a b"], 2, "meta-agent: allow: bad pattern 'f.a b'"),
        ({"META_AGENT_MODEL": "mistral:large"}, [], 2, "unknown provider 'mistral'"),
    ],
)
def test_bad_input_exits_2(
    llm: FakeLLM, config: Path, extra_env: dict, args: list[str], code: int, message: str
) -> None:
    environ = openai_env(
        llm, model="openai:fake-model", base=os.environ, OLLAMA_HOST=f"127.0.0.1:{free_port()}", **extra_env
    )
    if extra_env.get("META_AGENT_MODEL") == "":
        for key in ("META_AGENT_MODEL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
            environ.pop(key, None)
    result = run(config, environ, "task", *args)
    assert result.returncode == code
    assert result.stdout == ""
    assert message in result.stderr.splitlines()[-1]
    assert "Traceback" not in result.stderr


def test_a_provider_outage_exits_1_naming_the_run(llm: FakeLLM, config: Path) -> None:
    for _ in range(3):
        llm.reply(error_body("down for maintenance"), 503, retry_after_ms="1")
    result = run(config, openai_env(llm, model="openai:fake-model", base=os.environ), "task", "--json")
    assert result.returncode == 1
    structured = json.loads(result.stdout)  # --json: the failed run's result
    run_id = structured["run_id"]
    assert (structured["stop_reason"], structured["usage"]["model_calls"]) == ("error", 0)
    assert result.stderr.splitlines()[-1] == (
        "meta-agent: openai:fake-model: the provider failed (HTTP 503) after retries: down for maintenance"
        f" (run_id {run_id}; see meta-agent runs show {run_id})"
    )


def test_ctrl_c_cancels_the_run_and_stops_the_children(llm: FakeLLM, config: Path, marker: str) -> None:
    llm.reply(openai_reply(None, ("c1", "f__hang", {})))
    proc = subprocess.Popen(
        [*META_AGENT, "run", "hang around", "--json", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=openai_env(llm, model="openai:fake-model", base=os.environ),
    )
    assert proc.stderr is not None
    for line in proc.stderr:  # wait until the run is inside the child's call
        if line.startswith("step 1 · call f.hang"):
            break
    assert len(processes_with(marker)) == 1
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert err.splitlines()[-1] == "meta-agent: stopped by SIGINT"
    assert json.loads(out)["stop_reason"] == "cancelled"
    assert processes_with(marker) == []


# Fault injection (a bug of ours cannot be had for real): the process's reading of the model's answer is replaced by one
# that raises, before the command line runs.
WITH_A_BUG = """
import sys
from meta_agent.providers import openai

def broken(_usage):
    raise TypeError("a bug of ours\\nsecond line")

openai._usage = broken
from meta_agent.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_bug_of_ours_is_one_line_naming_the_run(llm: FakeLLM, config: Path) -> None:
    """A bug that ends the run is one line on stderr naming the run, exit 1, no traceback (that is for
    --log-level debug)."""
    llm.reply(openai_reply("fine"))
    environ = openai_env(llm, model="openai:fake-model", base=os.environ)
    result = subprocess.run(
        [sys.executable, "-c", WITH_A_BUG, "run", "task", "--config", str(config)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("meta-agent: failed: TypeError: a bug of ours (run_id "), result.stderr
    assert last.endswith("; --log-level debug shows where") and "Traceback" not in result.stderr, result.stderr
