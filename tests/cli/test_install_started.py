"""`meta-agent install HOST` as a user runs it (its own process), into a temporary HOME whose host files hold other
servers' entries: its check starts the entry and says "ready"; the entry it wrote, started the way the host starts it
(`env -i`, nothing but its own `env` and HOME, from another directory), answers an `agent` call made through the SDK's
stdio client, against the fake model endpoint. And the check's one line when something is wrong: a missing key, a
child whose command the host's PATH does not find."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import TESTS
from fake_llm import FakeLLM, openai_reply
from mcp import Client, StdioServerParameters

from meta_agent.cli.main import main
from meta_agent.hosts import HOSTS

pytestmark = pytest.mark.anyio
META_AGENT = Path(sys.executable).parent / "meta-agent"
USER_FILES = {
    "claude-desktop": ".config/Claude/claude_desktop_config.json",
    "cursor": ".cursor/mcp.json",
    "vscode": ".config/Code/User/mcp.json",
    "claude-code": ".claude.json",
}
# The bundled servers.json (its `time` child started by `${META_AGENT_PYTHON}`) for one host; none for the others.
SERVERS = {"claude-desktop": (TESTS.parent / "servers.json").read_text()}


def model_env(llm: FakeLLM) -> list[str]:
    """The --env options that point the entry's model at the fake endpoint (and at this tree's source, if the tests
    run against one through PYTHONPATH)."""
    options = ["META_AGENT_MODEL=openai:fake-model", f"OPENAI_BASE_URL={llm.url}/v1", "OPENAI_API_KEY=sk-test"]
    if "PYTHONPATH" in os.environ:
        options.append(f"PYTHONPATH={os.environ['PYTHONPATH']}")
    return [arg for option in options for arg in ("--env", option)]


def as_the_host_starts_it(entry: dict[str, Any], home: Path, cwd: Path) -> StdioServerParameters:
    """`env -i`, the entry's env and a HOME, then its command and arguments: nothing of this shell."""
    env = shutil.which("env")
    assert env is not None
    variables = [f"{name}={value}" for name, value in {**entry.get("env", {}), "HOME": str(home)}.items()]
    return StdioServerParameters(command=env, args=["-i", *variables, entry["command"], *entry["args"]], cwd=str(cwd))


@pytest.mark.parametrize("host", list(USER_FILES))
async def test_the_installed_entry_answers_an_agent_call_as_its_host_starts_it(
    host: str, llm: FakeLLM, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    file = home / USER_FILES[host]
    file.parent.mkdir(parents=True)
    key = HOSTS[host].servers_key
    others = {"fs": {"command": "npx", "args": ["-y", "fs"]}, "web": {"url": "https://example.com/mcp"}}
    file.write_text(json.dumps({key: others, "theme": "dark"}, indent=2))
    config = tmp_path / "Réglages à moi" / "servers.json"
    config.parent.mkdir()
    config.write_text(SERVERS.get(host, '{"mcpServers": {}}'))
    environ = {k: v for k, v in os.environ.items() if k != "XDG_CONFIG_HOME"} | {"HOME": str(home)}
    done = subprocess.run(
        [META_AGENT, "install", host, "--config", str(config), *model_env(llm)],
        env=environ,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith("ready: 3 tools (ask, plan, agent)"), done.stdout
    assert ("children ready: time" in done.stdout) == (host in SERVERS), done.stdout
    written = json.loads(file.read_text())
    assert written["theme"] == "dark" and {k: written[key][k] for k in others} == others
    entry = written[key]["meta-agent"]
    assert entry["args"] == ["serve", "--config", str(config)]

    elsewhere = tmp_path / "host cwd"
    elsewhere.mkdir()
    llm.reply(openai_reply("Hello from the fake model."))
    async with Client(as_the_host_starts_it(entry, home, elsewhere), mode="legacy") as client:
        result = await client.call_tool("agent", {"task": "Say hello."})
    assert not result.is_error, result.content
    assert result.structured_content is not None
    assert result.structured_content["answer"] == "Hello from the fake model."


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("HOME", str(path))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    return path


def test_the_check_names_a_missing_key_and_the_entry_stays_written(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "servers.json"
    config.write_text('{"mcpServers": {}}')
    code = main(["install", "cursor", "--config", str(config), "--env", "META_AGENT_MODEL=anthropic:claude-sonnet-5-5"])
    assert code == 1
    assert capsys.readouterr().out.splitlines()[-1] == (
        "not ready: META_AGENT_MODEL=anthropic:claude-sonnet-5-5: set ANTHROPIC_API_KEY"
    )
    assert "meta-agent" in json.loads((home / ".cursor/mcp.json").read_text())["mcpServers"]


def test_the_check_names_a_child_the_hosts_path_does_not_find(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A child started by a bare command name that only this shell's PATH finds."""
    tools = tmp_path / "my tools"
    tools.mkdir()
    tool = tools / "my-mcp-server"
    tool.write_text("#!/bin/sh\nexit 1\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    config = tmp_path / "servers.json"
    config.write_text('{"mcpServers": {"mine": {"command": "my-mcp-server"}}}')
    code = main(
        [
            "install",
            "vscode",
            "--config",
            str(config),
            "--env",
            "META_AGENT_MODEL=openai:x",
            "--env",
            "OPENAI_API_KEY=k",
        ]
    )
    assert code == 1
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.startswith("not ready: the child server 'mine' does not start as a host starts meta-agent: "), line
    assert line.endswith(
        "('my-mcp-server' is looked up on the host's PATH, /usr/bin:/bin:/usr/sbin:/sbin, where it is not: write its"
        f" absolute path, {tool}, as the command in servers.json)"
    ), line
