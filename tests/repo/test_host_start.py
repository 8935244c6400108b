"""The shipped host configuration works as a host starts it: `examples/claude_desktop_config.json`, with its
placeholder filled in, run under `env -i` (nothing but the entry's `env` block and HOME, no PATH) from another working
directory, serves the bundled servers.json's `time` child: the SDK's stdio client lists its tools and calls one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import TESTS, ProgressLog, check_children
from fake_llm import FakeLLM, openai_reply
from mcp import Client, StdioServerParameters

from meta_agent.config.servers import parse_servers

pytestmark = pytest.mark.anyio
ROOT = TESTS.parent
EXAMPLE = ROOT / "examples" / "claude_desktop_config.json"
# Where the example says to write the absolute path of the user's clone.
PLACEHOLDER = "/ABSOLUTE/PATH/TO/meta-agent"
TIME_TOOLS = {"get_current_time", "convert_time"}


def host_command(llm: FakeLLM, home: Path) -> list[str]:
    """The example's entry as a host runs it: `env -i`, then only its `env` block (the model pointed at the fake
    endpoint) and a HOME of the test's own, then its command and arguments, the placeholder filled in."""
    entry = json.loads(EXAMPLE.read_text())["mcpServers"]["meta-agent"]

    def filled(text: str) -> str:
        # The clone is this repository; its .venv is the one running the tests (sys.prefix).
        return text.replace(f"{PLACEHOLDER}/.venv", sys.prefix).replace(PLACEHOLDER, str(ROOT))

    environ = {
        **entry["env"],
        "META_AGENT_MODEL": "openai:fake-model",
        "OPENAI_BASE_URL": f"{llm.url}/v1",
        "OPENAI_API_KEY": "sk-test",
        "HOME": str(home),
    }
    if "PYTHONPATH" in os.environ:  # a run of these tests against another work tree's source: that source, not ours
        environ["PYTHONPATH"] = os.environ["PYTHONPATH"]
    env = shutil.which("env")
    assert env is not None
    return [env, "-i", *(f"{k}={v}" for k, v in environ.items()), filled(entry["command"]), *map(filled, entry["args"])]


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A working directory that is not the repository, as a host's is."""
    path = tmp_path / "host-cwd"
    path.mkdir()
    return path


async def test_the_example_host_config_serves_the_time_child(llm: FakeLLM, tmp_path: Path, elsewhere: Path) -> None:
    command, *args = host_command(llm, tmp_path)
    assert args[-3:-1] == ["serve", "--config"] and Path(args[-1]) == ROOT / "servers.json"
    llm.reply(openai_reply(None, ("c1", "time__get_current_time", {"timezone": "Asia/Tokyo"})))
    llm.reply(openai_reply("It is evening in Tokyo."))
    params = StdioServerParameters(command=command, args=args, cwd=str(elsewhere))
    async with Client(params) as client:
        progress = ProgressLog()
        result = await client.call_tool("agent", {"task": "Time in Tokyo?"}, progress_callback=progress)
        assert not result.is_error, result.content
        box = json.loads((await client.read_resource("meta-agent://toolbox")).contents[0].text)  # type: ignore[union-attr]
    servers = {s["name"]: s for s in box["servers"]}
    assert servers["time"]["status"] == "ready", servers["time"]
    assert {tool["name"] for tool in box["tools"] if tool.get("server") == "time"} >= {
        f"time.{name}" for name in TIME_TOOLS
    }, box["tools"]
    assert result.structured_content is not None
    call: dict[str, Any] = result.structured_content["steps"][0]["tool_calls"][0]
    assert call["name"] == "time.get_current_time" and not call.get("is_error"), call
    assert "step 1 · time.get_current_time ok" in " ".join(progress.messages)


def test_check_from_a_host_environment(llm: FakeLLM, tmp_path: Path, elsewhere: Path) -> None:
    """`meta-agent check` as the host's entry would run it, `check` in place of `serve`: every child ready."""
    command = host_command(llm, tmp_path)
    command[command.index("serve")] = "check"
    done = subprocess.run(command, cwd=elsewhere, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {line.split()[0]: line.split()[1] for line in check_children(done.stdout)}
    assert rows == {"time": "ready"}, done.stdout
    # the model of the entry's env: the fake endpoint on 127.0.0.1, asked for its model list
    assert done.stdout.splitlines()[-2:] == [
        "META_AGENT_MODEL=openai:fake-model",
        f"  openai:fake-model  ready   {llm.url}/v1/models lists qwen3:latest, not fake-model: llama-server answers"
        " to any name, other servers refuse one they do not list",
    ]


def test_own_python_is_the_python_running_meta_agent() -> None:
    """`${META_AGENT_PYTHON}` is this interpreter, needs no environment, and the environment cannot change it."""
    text = json.dumps({"mcpServers": {"t": {"command": "${META_AGENT_PYTHON}", "args": ["-m", "mcp_server_time"]}}})
    assert parse_servers(text, "servers.json", {})["t"].command == sys.executable
    assert (
        parse_servers(text, "servers.json", {"META_AGENT_PYTHON": "/elsewhere/python"})["t"].command == sys.executable
    )


def test_a_relative_config_missing_names_the_working_directory(llm: FakeLLM, tmp_path: Path, elsewhere: Path) -> None:
    """A host's entry without `--config` looks for ./servers.json where the host started it: the line says where."""
    command = host_command(llm, tmp_path)
    del command[command.index("--config") :]
    command[command.index("serve")] = "check"
    done = subprocess.run(command, cwd=elsewhere, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        f"meta-agent: servers.json: no such file in the working directory {elsewhere}"
        " (pass --config PATH or set META_AGENT_CONFIG)"
    ], done.stderr
