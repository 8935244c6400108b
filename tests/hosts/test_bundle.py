"""`meta-agent bundle`, in this process: the zip's files, the manifest's server entry and the settings Claude Desktop
asks for (each provider's key marked sensitive), the same bytes for the same inputs, and one line for bad input."""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from meta_agent.cli.main import main
from meta_agent.hosts import bundle

pytestmark = pytest.mark.quick


def manifest_of(path: Path) -> dict[str, Any]:
    with zipfile.ZipFile(path) as archive:
        value: dict[str, Any] = json.loads(archive.read("manifest.json"))
        return value


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "répertoire à moi" / "servers.json"
    path.parent.mkdir()
    path.write_text('{"mcpServers": {"time": {"command": "${META_AGENT_PYTHON}", "args": ["-m", "mcp_server_time"]}}}')
    return path


def test_the_bundle_holds_the_manifest_servers_json_and_its_server(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "out dir" / "meta-agent.mcpb"
    output.parent.mkdir()
    assert main(["bundle", "--config", str(config), "--output", str(output)]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {output} (manifest.json, servers.json, server/main.py)")
    with zipfile.ZipFile(output) as archive:
        assert archive.namelist() == ["manifest.json", "servers.json", "server/main.py"]
        assert archive.read("servers.json") == config.read_bytes()
        assert b"from meta_agent.cli.main import entry" in archive.read("server/main.py")
    server = manifest_of(output)["server"]
    assert server == {
        "type": "python",
        "entry_point": "server/main.py",
        "mcp_config": {
            "command": str(Path(sys.executable).absolute()),
            "args": ["${__dirname}/server/main.py", "serve", "--config", "${__dirname}/servers.json"],
            "env": {
                "META_AGENT_MODEL": "${user_config.model}",
                "ANTHROPIC_API_KEY": "${user_config.anthropic_api_key}",
                "OPENAI_API_KEY": "${user_config.openai_api_key}",
                "GEMINI_API_KEY": "${user_config.gemini_api_key}",
            },
        },
    }


def test_the_model_and_each_key_are_settings_of_the_user_the_keys_sensitive(config: Path, tmp_path: Path) -> None:
    output = tmp_path / "m.mcpb"
    bundle.build(config, output)
    fields = manifest_of(output)["user_config"]
    assert fields["model"]["required"] is True and fields["model"]["default"] == "anthropic:claude-sonnet-5-5"
    assert "sensitive" not in fields["model"]
    for provider in ("anthropic", "openai", "gemini"):
        key = fields[f"{provider}_api_key"]
        # sensitive; optional with an empty default, so an unset key reaches meta-agent as unset, not as `${...}`
        assert (key["type"], key["sensitive"], key["required"], key["default"]) == ("string", True, False, "")


def test_the_same_inputs_make_the_same_bytes_and_the_trust_file_goes_along(config: Path, tmp_path: Path) -> None:
    first, second = tmp_path / "a.mcpb", tmp_path / "b.mcpb"
    bundle.build(config, first)
    bundle.build(config, second)
    assert first.read_bytes() == second.read_bytes()
    config.with_name("servers.trust.json").write_text('{"version": 1, "tools": {}}')
    assert bundle.build(config, first)[-1] == "servers.trust.json"


def test_another_python_and_an_output_directory(config: Path, tmp_path: Path) -> None:
    assert main(["bundle", "--config", str(config), "--output", str(tmp_path), "--python", "/opt/py/bin/python3"]) == 0
    assert manifest_of(tmp_path / "meta-agent.mcpb")["server"]["mcp_config"]["command"] == "/opt/py/bin/python3"


def test_a_missing_servers_json_or_an_output_that_cannot_be_written_is_one_line(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bundle", "--config", str(tmp_path / "none.json")]) == 2
    assert "none.json: no such file" in capsys.readouterr().err
    output = tmp_path / "no such dir" / "x.mcpb"
    assert main(["bundle", "--config", str(config), "--output", str(output)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"meta-agent: {output}: cannot write the bundle: No such file or directory"
    )
