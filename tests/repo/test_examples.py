"""The examples stay true: the sample configuration checks out and the stdio driver script works."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import TESTS, check_children
from fake_llm import FakeLLM, openai_reply

ROOT = TESTS.parent


def test_the_example_servers_json_checks_out() -> None:
    # Its relative paths are relative to the repository root; mcp-server-time comes with the test extras.
    venv_bin = str(Path(sys.executable).parent)
    environ = {**os.environ, "PATH": f"{venv_bin}:{os.environ['PATH']}"}
    result = subprocess.run(
        [sys.executable, "-m", "meta_agent", "check", "--config", "examples/servers.json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    states = {line.split()[0]: line.split()[1] for line in check_children(result.stdout)}
    assert states == {"time": "ready", "everything": "ready", "git": "disabled", "docs": "disabled"}


def test_the_claude_desktop_entry_is_valid_json() -> None:
    entry = json.loads((ROOT / "examples" / "claude_desktop_config.json").read_text())["mcpServers"]["meta-agent"]
    assert entry["args"][0] == "serve"


def test_the_stdio_driver_prints_progress_and_the_answer(tmp_path: Path) -> None:
    config = tmp_path / "servers.json"
    config.write_text(
        json.dumps({"mcpServers": {"time": {"command": sys.executable, "args": ["-m", "mcp_server_time"]}}})
    )
    with FakeLLM() as llm:
        llm.reply(openai_reply(None, ("c1", "time__get_current_time", {"timezone": "Asia/Tokyo"})))
        llm.reply(openai_reply("Evening in Tokyo."))
        environ = {
            **os.environ,
            "META_AGENT_MODEL": "openai:fake-model",
            "OPENAI_BASE_URL": f"{llm.url}/v1",
            "OPENAI_API_KEY": "sk-test",
        }
        result = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "drive_stdio.py"), "Time in Tokyo?", "--config", str(config)],
            capture_output=True,
            text=True,
            env=environ,
            timeout=120,
        )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Evening in Tokyo.\n"
    progress = [line for line in result.stderr.splitlines() if line.startswith("[")]
    assert progress[1:3] == ["[2] step 1 · model", '[3] step 1 · call time.get_current_time {"timezone": "Asia/Tokyo"}']
    assert progress[-1] == "[6] done · final (2 model calls, 1 tool call)"
