"""The bundle as Claude Desktop takes it: the `@anthropic-ai/mcpb` tool (tests/node_modules) unpacks it and its
`validate` accepts the manifest (and refuses one that breaks the schema: the tool is really judging); then the server
entry, its variables filled in as the host fills them (`${__dirname}` the unpacked folder, `${user_config.*}` the
user's settings), started under `env -i` from another directory, answers `initialize` and lists meta-agent's tools."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import TESTS
from mcp import Client, StdioServerParameters

from meta_agent.hosts import bundle

pytestmark = pytest.mark.anyio
MCPB = TESTS / "node_modules" / ".bin" / "mcpb"


@pytest.fixture
def mcpb() -> Path:
    if not MCPB.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{MCPB} is missing: `npm ci --prefix tests` installs the mcpb tool")
        pytest.skip("the mcpb tool is not installed (npm ci --prefix tests installs it)")
    return MCPB


def mcpb_run(mcpb: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([mcpb, *map(str, args)], capture_output=True, text=True, timeout=60)


@pytest.fixture
def unpacked(mcpb: Path, tmp_path: Path) -> Path:
    config = tmp_path / "servers.json"
    config.write_text('{"mcpServers": {}}')
    output = tmp_path / "meta-agent.mcpb"
    bundle.build(config, output)
    folder = tmp_path / "Claude Extensions" / "mé ta-agent"  # where a host unpacks it: a space, a letter beyond ASCII
    done = mcpb_run(mcpb, "unpack", output, folder)
    assert done.returncode == 0, done.stdout + done.stderr
    return folder


def test_mcpb_validate_accepts_the_manifest_and_refuses_a_broken_one(mcpb: Path, unpacked: Path) -> None:
    done = mcpb_run(mcpb, "validate", unpacked / "manifest.json")
    assert done.returncode == 0 and "Manifest schema validation passes!" in done.stdout, done.stdout + done.stderr
    manifest = json.loads((unpacked / "manifest.json").read_text())
    del manifest["server"]["mcp_config"]
    manifest["user_config"]["model"]["sensitive"] = "yes"
    (unpacked / "manifest.json").write_text(json.dumps(manifest))
    done = mcpb_run(mcpb, "validate", unpacked / "manifest.json")
    assert done.returncode != 0 and "server.mcp_config" in done.stdout and "user_config.model.sensitive" in done.stdout


def filled(value: Any, variables: dict[str, str]) -> Any:
    """The manifest's `${...}` replaced as the host replaces them."""
    if isinstance(value, str):
        for name, replacement in variables.items():
            value = value.replace(f"${{{name}}}", replacement)
        return value
    if isinstance(value, list):
        return [filled(item, variables) for item in value]
    return {key: filled(item, variables) for key, item in value.items()}


async def test_its_server_entry_starts_and_lists_meta_agents_tools(unpacked: Path, tmp_path: Path) -> None:
    manifest = json.loads((unpacked / "manifest.json").read_text())
    settings = {key: field["default"] for key, field in manifest["user_config"].items()}
    settings |= {"model": "openai:gpt-5.5", "openai_api_key": "sk-test"}
    config = filled(
        manifest["server"]["mcp_config"],
        {"__dirname": str(unpacked)} | {f"user_config.{key}": str(value) for key, value in settings.items()},
    )
    assert "${" not in json.dumps(config)
    env = shutil.which("env")
    assert env is not None
    variables = [f"{k}={v}" for k, v in {**config["env"], "HOME": str(tmp_path)}.items()]
    if "PYTHONPATH" in os.environ:  # a run of these tests against another work tree's source
        variables.append(f"PYTHONPATH={os.environ['PYTHONPATH']}")
    params = StdioServerParameters(
        command=env, args=["-i", *variables, config["command"], *config["args"]], cwd=str(tmp_path)
    )
    async with Client(params, mode="legacy") as client:
        assert client.server_info is not None and client.server_info.name == "meta-agent"
        tools = {tool.name for tool in (await client.list_tools()).tools}
    assert {"ask", "plan", "agent"} <= tools
