"""The repeatable options of `meta-agent run` (`--tools`, `--allow`) take one pattern each, so the task may come
before them, after them or between them, and each given again adds a pattern."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FAULT_SERVER, TIME_COMMAND, openai_env
from fake_llm import FakeLLM, openai_reply

from meta_agent.cli.main import _parser

TASK = "What time is it in Tokyo?"


@pytest.mark.parametrize(
    ("argv", "tools", "allow"),
    [
        (["--tools", "time.*", TASK], ["time.*"], None),
        ([TASK, "--tools", "time.*"], ["time.*"], None),
        (["--tools", "time.*", "--tools", "f.echo", TASK], ["time.*", "f.echo"], None),
        (["--tools", "time.*", TASK, "--tools", "f.echo"], ["time.*", "f.echo"], None),
        (["--allow", "f.*", TASK], None, ["f.*"]),
        ([TASK, "--allow", "f.*"], None, ["f.*"]),
        (["--allow", "f.*", "--allow", "time.*", TASK], None, ["f.*", "time.*"]),
        (["--tools", "f.*", "--allow", "f.echo", TASK, "--tools", "time.*"], ["f.*", "time.*"], ["f.echo"]),
    ],
)
def test_the_task_is_never_taken_for_a_pattern(
    argv: list[str], tools: list[str] | None, allow: list[str] | None
) -> None:
    args = _parser().parse_args(["run", *argv])
    assert (args.task, args.tools, args.allow) == (TASK, tools, allow)


def test_a_second_pattern_after_one_option_is_one_clear_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        _parser().parse_args(["run", TASK, "--tools", "time.*", "f.*"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err == "meta-agent: unrecognized arguments: f.* (see meta-agent --help)\n"


@pytest.mark.parametrize("task", ["", " \t "])
def test_an_empty_task_is_one_clear_line(task: str, capsys: pytest.CaptureFixture[str]) -> None:
    """No model turn is spent on a task without a word in it."""
    with pytest.raises(SystemExit) as stopped:
        _parser().parse_args(["run", task])
    assert stopped.value.code == 2
    assert capsys.readouterr().err == (
        "meta-agent run: argument task: the task is empty: say what to do (see meta-agent run --help)\n"
    )


def test_tools_before_the_task_from_the_command_line(llm: FakeLLM, tmp_path: Path) -> None:
    """The README's own example, with the task last: only the time tools are offered, and the run answers."""
    config = tmp_path / "servers.json"
    fault = {"command": sys.executable, "args": [str(FAULT_SERVER)]}
    config.write_text(json.dumps({"mcpServers": {"time": TIME_COMMAND, "f": fault}}))
    llm.reply(openai_reply("It is evening in Tokyo."))
    result = subprocess.run(
        [sys.executable, "-m", "meta_agent", "run", "--config", str(config), "--tools", "time.*", TASK],
        capture_output=True,
        text=True,
        env=openai_env(llm, model="openai:fake-model", base=os.environ),
        timeout=120,
    )
    assert (result.returncode, result.stdout) == (0, "It is evening in Tokyo.\n"), result.stderr
    offered = {tool["function"]["name"] for tool in llm.requests[0].body["tools"]}
    assert offered == {"time__get_current_time", "time__convert_time"}


@pytest.mark.parametrize(("argv", "code"), [([], None), (["--code"], True), (["--no-code"], False)])
def test_code_mode_is_the_setting_s_unless_the_command_line_says(argv: list[str], code: bool | None) -> None:
    assert _parser().parse_args(["run", TASK, *argv]).code is code


def test_run_with_code_offers_run_code_and_ask_refuses_it_in_one_line(llm: FakeLLM, tmp_path: Path) -> None:
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"time": TIME_COMMAND}}))
    environ = openai_env(llm, model="openai:fake-model", base=os.environ)
    llm.reply(openai_reply("It is evening in Tokyo."))
    command = [sys.executable, "-m", "meta_agent", "run", "--config", str(config), TASK, "--code"]
    result = subprocess.run(command, capture_output=True, text=True, env=environ, timeout=120)
    assert (result.returncode, result.stdout) == (0, "It is evening in Tokyo.\n"), result.stderr
    offered = {tool["function"]["name"] for tool in llm.requests[0].body["tools"]}
    assert "run_code" in offered and "time__get_current_time" not in offered
    asked = subprocess.run([*command, "--mode", "ask"], capture_output=True, text=True, env=environ, timeout=120)
    assert (asked.returncode, asked.stderr) == (
        2,
        "meta-agent: --code: ask mode is one model turn with no program to run; use --mode agent or plan\n",
    )
