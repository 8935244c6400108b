"""`meta-agent run` asking the person at the terminal y/n/t, and `--allow`: a real subprocess whose stdin, stdout and
stderr are a real pseudo-terminal, a real child server (the fault server's `delete_file` is destructive, so `ask` by
default), the real openai SDK against the fake model."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import FAULT_SERVER, openai_env, processes_with
from fake_llm import FakeLLM, openai_reply
from pty_terminal import META_AGENT, PROMPT, Terminal

from meta_agent.cli.terminal import LiveView
from meta_agent.core import events as ev

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")

QUESTION = """? Tool 'f.delete_file' wants to execute with arguments: {"path": "notes.txt"}"""
DELETE = ("c1", "f__delete_file", {"path": "notes.txt"})


@pytest.fixture
def marker() -> str:
    return f"marker-{uuid.uuid4().hex}"


def write_config(tmp_path: Path, marker: str, **trust: str) -> Path:
    path = tmp_path / "servers.json"
    fault: dict[str, Any] = {"command": sys.executable, "args": [str(FAULT_SERVER), "--name", marker]}
    if trust:
        fault["trust"] = trust
    path.write_text(json.dumps({"mcpServers": {"f": fault}}))
    return path


@pytest.fixture
def config(tmp_path: Path, marker: str) -> Path:
    return write_config(tmp_path, marker)


@pytest.fixture
def environ(llm: FakeLLM) -> dict[str, str]:
    return openai_env(llm, model="openai:fake-model", base=os.environ, NO_COLOR="1")


@pytest.fixture
def on_a_terminal(config: Path, environ: dict[str, str]) -> Iterator[Callable[..., Terminal]]:
    """Starts `meta-agent run` on a terminal (once the test has queued the model's replies), with extra arguments."""
    started: list[Terminal] = []

    def start(*args: str) -> Terminal:
        started.append(Terminal([*META_AGENT, "run", "tidy up", "--config", str(config), *args], environ))
        return started[-1]

    yield start
    for term in started:
        if term.proc.poll() is None:  # a failed test's process: not left behind
            term.proc.kill()
            term.proc.wait(timeout=30)


def tool_results(llm: FakeLLM, request: int = 1) -> list[str]:
    """The tool results the model was sent in its `request`-th request."""
    messages = llm.requests[request].body["messages"]
    return [message["content"] for message in messages if message["role"] == "tool"]


def test_y_runs_the_call(llm: FakeLLM, on_a_terminal: Callable[..., Terminal], marker: str) -> None:
    llm.reply(openai_reply(None, DELETE))
    llm.reply(openai_reply("Deleted."))
    terminal = on_a_terminal()
    terminal.wait_for(PROMPT)
    assert QUESTION in terminal.screen
    assert len(llm.requests) == 1  # the run waits for the answer
    terminal.type("y\n")
    assert terminal.finish() == 0, terminal.screen
    assert tool_results(llm) == ["deleted notes.txt"]
    lines = terminal.screen.splitlines()
    at = lines.index(QUESTION)  # the question sits in the step's place, its answer line right under it
    assert lines[at - 1] == 'step 1 · call f.delete_file {"path": "notes.txt"}'
    assert lines[at + 1 : at + 3] == [f"{PROMPT}y", "step 1 · f.delete_file allowed: allowed once"]
    assert lines[at + 3].startswith("step 1 · f.delete_file ok (")
    assert "asking the user" not in terminal.screen  # the question says it
    assert lines[-1] == "Deleted."
    assert processes_with(marker) == []


def test_n_refuses_and_the_model_is_told(llm: FakeLLM, on_a_terminal: Callable[..., Terminal]) -> None:
    llm.reply(openai_reply(None, DELETE))
    llm.reply(openai_reply("I left it."))
    terminal = on_a_terminal()
    terminal.wait_for(PROMPT)
    terminal.type("n\n")
    assert terminal.finish() == 0, terminal.screen
    assert tool_results(llm) == [
        "[error] the user did not allow f.delete_file (denied); do without it, or ask the user"
    ]
    assert "step 1 · f.delete_file not allowed: denied" in terminal.screen


def test_t_asks_once_for_two_calls_of_the_tool(llm: FakeLLM, on_a_terminal: Callable[..., Terminal]) -> None:
    llm.reply(openai_reply(None, DELETE, ("c2", "f__delete_file", {"path": "b.txt"})))
    llm.reply(openai_reply(None, ("c3", "f__delete_file", {"path": "c.txt"})))
    llm.reply(openai_reply("Tidied."))
    terminal = on_a_terminal()
    terminal.wait_for(PROMPT)
    terminal.type("t\n")
    assert terminal.finish() == 0, terminal.screen
    assert terminal.screen.count(PROMPT) == 1
    assert tool_results(llm) == ["deleted notes.txt", "deleted b.txt"]
    assert tool_results(llm, 2)[-1] == "deleted c.txt"  # the next step too: for the rest of the run
    assert "step 1 · f.delete_file allowed: allowed for the rest of this run" in terminal.screen


def test_parallel_calls_are_asked_one_at_a_time(llm: FakeLLM, tmp_path: Path, marker: str, environ: dict) -> None:
    """Two servers' calls of one step run in parallel: their questions come one after the other, and no event line
    comes between a question and its answer's line."""
    fault = {"command": sys.executable, "args": [str(FAULT_SERVER), "--name", marker]}
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"f": fault, "g": fault}}))
    llm.reply(openai_reply(None, DELETE, ("c2", "g__delete_file", {"path": "b.txt"})))
    llm.reply(openai_reply("Deleted both."))
    terminal = Terminal([*META_AGENT, "run", "tidy up", "--config", str(config)], environ)
    try:
        terminal.wait_for(PROMPT)
        assert terminal.screen.count("? Tool ") == 1  # the other call's question waits for this one's answer
        terminal.type("y\n")
        terminal.wait_for(PROMPT, count=2)
        terminal.type("y\n")
        assert terminal.finish() == 0, terminal.screen
    finally:
        if terminal.proc.poll() is None:
            terminal.proc.kill()
            terminal.proc.wait(timeout=30)
    lines = terminal.screen.splitlines()
    at = lines.index(QUESTION)
    assert lines[at + 1 : at + 3] == [f"{PROMPT}y", "step 1 · f.delete_file allowed: allowed once"]
    second = lines.index("""? Tool 'g.delete_file' wants to execute with arguments: {"path": "b.txt"}""")
    assert second > at + 2
    assert lines[second + 1 : second + 3] == [f"{PROMPT}y", "step 1 · g.delete_file allowed: allowed once"]
    assert sorted(tool_results(llm)) == ["deleted b.txt", "deleted notes.txt"]


@pytest.mark.anyio
async def test_event_lines_wait_for_the_question_and_its_answer() -> None:
    """The live view while a question is open: other lines wait and follow the answer's line; heartbeats are
    dropped, as they would be stale by then; the question's own `approval_requested` is no line."""
    out = io.StringIO()
    view = LiveView(out)
    await view(ev.ApprovalRequested(step=1, call_id="c1", name="f.delete_file", arguments={}))
    with view.asking("f.delete_file") as screen:
        screen.write("? the question\n")
        await view(ev.ToolCallStarted(step=1, call_id="c2", name="g.delete_file", arguments={}))
        await view(ev.Heartbeat(step=1, waiting_for="the user's answer", elapsed_s=10))
        screen.write(f"{PROMPT}y\n")
    await view(ev.ToolCallStarted(step=1, call_id="c3", name="g.other", arguments={}))
    await view(ev.ApprovalAnswered(step=1, call_id="c1", name="f.delete_file", allowed=True, answer="allowed once"))
    await view(ev.ToolCallStarted(step=1, call_id="c4", name="g.last", arguments={}))
    assert out.getvalue().splitlines() == [
        "? the question",
        f"{PROMPT}y",
        "step 1 · f.delete_file allowed: allowed once",
        "step 1 · call g.delete_file {}",
        "step 1 · call g.other {}",
        "step 1 · call g.last {}",
    ]


def test_anything_else_asks_again(llm: FakeLLM, on_a_terminal: Callable[..., Terminal]) -> None:
    llm.reply(openai_reply(None, DELETE))
    llm.reply(openai_reply("Deleted."))
    terminal = on_a_terminal()
    terminal.wait_for(PROMPT)
    terminal.type("maybe\n")
    terminal.wait_for(PROMPT, count=2)
    terminal.type("\n")
    terminal.wait_for(PROMPT, count=3)
    assert len(llm.requests) == 1 and terminal.proc.poll() is None
    terminal.type("Y\n")
    assert terminal.finish() == 0, terminal.screen
    assert tool_results(llm) == ["deleted notes.txt"]
    assert terminal.screen.count(QUESTION) == 1  # the question once, the prompt again


def test_the_end_of_input_refuses(llm: FakeLLM, on_a_terminal: Callable[..., Terminal]) -> None:
    llm.reply(openai_reply(None, DELETE))
    llm.reply(openai_reply("I left it."))
    terminal = on_a_terminal()
    terminal.wait_for(PROMPT)
    terminal.type("\x04")  # Ctrl-D at the start of a line
    assert terminal.finish() == 0, terminal.screen
    assert tool_results(llm) == [
        "[error] the user did not allow f.delete_file (no answer: the input ended); do without it, or ask the user"
    ]


def test_ctrl_c_while_asking_stops_the_run_and_the_children(
    llm: FakeLLM, on_a_terminal: Callable[..., Terminal], marker: str
) -> None:
    llm.reply(openai_reply(None, DELETE))
    terminal = on_a_terminal()
    terminal.wait_for(PROMPT)
    assert len(processes_with(marker)) == 1
    terminal.proc.send_signal(signal.SIGINT)
    assert terminal.finish(timeout=30) == 130, terminal.screen
    assert terminal.screen.splitlines()[-1] == "meta-agent: stopped by SIGINT"
    assert f"{PROMPT}\n" in terminal.screen  # the question's line was ended, not run into
    assert processes_with(marker) == []
    assert len(llm.requests) == 1


def run_without_a_terminal(config: Path, environ: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """A run whose stdin is a terminal nobody types on, but whose stderr is not one: nobody can be asked, so nothing
    may wait (communicate's timeout fails the test if something does)."""
    primary, secondary = os.openpty()
    try:
        proc = subprocess.Popen(
            [*META_AGENT, "run", "tidy up", "--config", str(config), *args],
            stdin=secondary,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environ,
        )
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(primary)
        os.close(secondary)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_without_a_terminal_it_is_refused_without_waiting(llm: FakeLLM, config: Path, environ: dict) -> None:
    llm.reply(openai_reply(None, DELETE))
    llm.reply(openai_reply("I left it."))
    result = run_without_a_terminal(config, environ)
    assert result.returncode == 0, result.stderr
    fix = "run again with `--allow f.delete_file` to allow it, or record `meta-agent trust f.delete_file always`"
    assert tool_results(llm)[0] == (
        f"[error] the user did not allow f.delete_file (nobody to ask, not on a terminal; {fix}); do without it, or"
        " ask the user"
    )
    assert "Allow execution?" not in result.stderr
    # the step lines name the argument that allows the call, whole (a progress line is cut after a word, if at all)
    lines = result.stderr.splitlines()
    assert f"step 1 · f.delete_file not allowed: nobody to ask, not on a terminal; {fix}" in lines
    refused = next(line for line in lines if line.startswith("step 1 · f.delete_file error ("))
    assert refused.endswith(f"{fix}); do without it, or ask the user"), refused


def test_allow_runs_matching_tools_without_asking(llm: FakeLLM, config: Path, environ: dict) -> None:
    llm.reply(openai_reply(None, DELETE))
    llm.reply(openai_reply("Deleted."))
    result = run_without_a_terminal(config, environ, "--allow", "f.delete_*", "--allow", "f.mutate")
    assert result.returncode == 0, result.stderr
    assert tool_results(llm) == ["deleted notes.txt"]
    assert "step 1 · f.delete_file allowed: allowed by --allow f.delete_*" in result.stderr.splitlines()


def test_allow_on_a_terminal_asks_nothing(llm: FakeLLM, on_a_terminal: Callable[..., Terminal]) -> None:
    llm.reply(openai_reply(None, DELETE))
    llm.reply(openai_reply("Deleted."))
    term = on_a_terminal("--allow", "f.*")
    assert term.finish() == 0, term.screen
    assert PROMPT not in term.screen
    assert tool_results(llm) == ["deleted notes.txt"]


def test_allow_never_lowers_never(llm: FakeLLM, tmp_path: Path, marker: str, environ: dict) -> None:
    config = write_config(tmp_path, marker, delete_file="never")
    llm.reply(openai_reply(None, DELETE))
    llm.reply(openai_reply("It is blocked."))
    result = run_without_a_terminal(config, environ, "--allow", "f.*")
    assert result.returncode == 0, result.stderr
    assert "f.delete_file is blocked (trust level never" in tool_results(llm)[0]
