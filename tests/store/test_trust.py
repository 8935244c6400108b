"""Recorded trust levels: `meta-agent trust`, the trust file beside the config, and a changed tool losing its trust."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FAULT_SERVER, fault_entry, openai_env
from fake_llm import FakeLLM, openai_reply
from mcp import Client

from meta_agent.config.settings import Settings
from meta_agent.engine import Engine
from meta_agent.errors import ConfigError
from meta_agent.front.server import build_server
from meta_agent.store import trustfile
from meta_agent.toolbox.build import definition_of


def fault(*flags: str) -> dict:
    return {"command": sys.executable, "args": [str(FAULT_SERVER), *flags]}


def meta_agent(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "meta_agent", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def write(config: Path, *flags: str) -> None:
    config.write_text(json.dumps({"mcpServers": {"f": fault(*flags)}}))


def test_record_list_and_a_changed_tool_losing_its_trust(tmp_path: Path) -> None:
    config = tmp_path / "servers.json"
    write(config)
    recorded = meta_agent(config, "trust", "f.delete_*", "always")
    assert recorded.returncode == 0, recorded.stderr
    assert recorded.stdout.startswith("always: f.delete_file (recorded in ")
    assert (tmp_path / "servers.trust.json").exists()

    listing = meta_agent(config, "trust")
    assert listing.stdout.splitlines()[1].split()[:2] == ["f.delete_file", "always"]
    assert listing.stdout.splitlines()[1].endswith("applies")
    tools = meta_agent(config, "tools")
    line = next(x for x in tools.stdout.splitlines() if "f.delete_file" in x)
    assert "always (meta-agent trust, " in line

    write(config, "--tool-version", "2")  # the child changed the tool's definition
    listing = meta_agent(config, "trust")
    assert listing.stdout.splitlines()[1].endswith("not applied: the tool changed since; record it again to trust it")
    line = next(x for x in meta_agent(config, "tools").stdout.splitlines() if "f.delete_file" in x)
    assert (
        "ask (not read-only, at most ask: the 'always' recorded for it was dropped as the tool changed since)" in line
    )

    assert meta_agent(config, "trust", "f.delete_file", "always").returncode == 0  # re-approved
    assert "always (meta-agent trust" in next(
        x for x in meta_agent(config, "tools").stdout.splitlines() if "delete" in x
    )

    forgot = meta_agent(config, "trust", "f.*", "forget")
    assert forgot.stdout == "forgot f.delete_file\n"
    assert json.loads((tmp_path / "servers.trust.json").read_text()) == {"tools": {}}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["trust", "nope.*", "always"], "meta-agent: trust: 'nope.*' matches no tool"),
        (["trust", "f.echo"], "meta-agent: trust: give a level after the tool"),
        (["trust", "f.echo", "sometimes"], "argument level: invalid choice: 'sometimes'"),
        (["trust", "f.*", "forget"], "meta-agent: trust: nothing recorded matches 'f.*'"),
    ],
)
def test_bad_trust_commands_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    config = tmp_path / "servers.json"
    write(config)
    result = meta_agent(config, *args)
    assert result.returncode == 2
    assert message in result.stderr and len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "{",
            "servers.trust.json:1:2: invalid JSON (line 1, column 2): the text ends before every '{' and '[' is closed",
        ),
        ("[]", 'expected {"tools": {...}}'),
        ('{"tools": []}', 'expected {"tools": {...}}'),
        (
            '{"tools": {"f.x": {"level": "maybe", "definition": "h"}}}',
            "servers.trust.json: tools[\"f.x\"].level: input should be 'never', 'ask' or 'always', got \"maybe\"",
        ),
        # the entry's name quoted: a name with a line break in it cannot break the line
        (
            '{"tools": {"f.x\\nmeta-agent: all fine": {"level": "ask"}}}',
            'tools["f.x\\nmeta-agent: all fine"].definition: required key is missing',
        ),
        (
            '{"tools": {"a": {"level": "ask", "definition": 1}, "b": 2}}',
            "tools.a.definition: expected a string, got 1; tools.b: input should be a dictionary or an instance of"
            " Recorded, got 2; fix it, or forget the entry: `meta-agent trust NAME forget`",
        ),
    ],
)
def test_a_broken_trust_file_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "servers.json"
    write(config)
    (tmp_path / "servers.trust.json").write_text(text)
    with pytest.raises(ConfigError, match=r"servers\.trust\.json(:\d+:\d+)?: "):
        trustfile.load(tmp_path / "servers.trust.json")
    result = meta_agent(config, "tools")
    assert result.returncode == 2 and message in result.stderr
    assert len(result.stderr.splitlines()) == 1
    # The toolbox still shows, with the levels that apply meanwhile and the problem.
    problem = result.stderr.removeprefix("meta-agent: ").rstrip("\n")
    assert problem.endswith("; recorded trust levels do not apply until it is fixed")
    assert f"problem: {problem}" in result.stdout.splitlines()
    assert "ask (not read-only)" in next(x for x in result.stdout.splitlines() if "f.delete_file" in x)
    described = meta_agent(config, "tools", "--json")
    assert described.returncode == 2
    box = json.loads(described.stdout)
    assert box["problems"] == [problem]
    assert box["trust_file"] == {"path": str(tmp_path / "servers.trust.json"), "problem": problem}


@pytest.mark.anyio
async def test_a_recorded_level_lets_a_tool_run_without_asking(tmp_path: Path, llm: FakeLLM) -> None:
    path = tmp_path / "servers.trust.json"
    servers = {"f": fault_entry()}
    async with Engine(Settings(), servers, {}, trust_file=path) as engine:
        await engine.pool.wait_settled()
        spec = engine.toolbox().by_name["f.delete_file"]
        assert spec.trust == "ask"
        definition = definition_of(spec)
        trustfile.save(path, {spec.name: trustfile.Recorded(level="always", definition=definition, recorded="now")})
        assert engine.toolbox().by_name["f.delete_file"].trust == "always"  # read again once it changed

    llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": "/x"})))
    llm.reply(openai_reply("done"))
    server = build_server(Settings(model="openai:fake-model"), servers, openai_env(llm), trust_file=path)
    async with Client(server) as client:  # declares no elicitation: without the record it would be refused
        result = await client.call_tool("agent", {"task": "delete /x"})
    assert result.content[0].text == "done"  # type: ignore[union-attr]
    assert llm.requests[-1].body["messages"][-1]["content"] == "deleted /x"


def test_the_trust_file_sits_beside_the_config() -> None:
    assert trustfile.trust_path(Path("/etc/meta/servers.json")) == Path("/etc/meta/servers.trust.json")
    assert trustfile.trust_path(Path("team.json")) == Path("team.trust.json")
    assert os.sep not in str(trustfile.trust_path(Path("servers.json")))


@pytest.mark.anyio
async def test_a_changed_tool_never_gains_trust(tmp_path: Path) -> None:
    """A record that no longer matches keeps `never`, and lowers anything else to at most `ask` — even for a tool
    whose new annotations call it read-only."""
    path = tmp_path / "servers.trust.json"
    stale = "sha256:of-an-older-definition"
    trustfile.save(
        path,
        {
            "f.echo": trustfile.Recorded(level="always", definition=stale, recorded="then"),
            "f.delete_file": trustfile.Recorded(level="never", definition=stale, recorded="then"),
        },
    )
    async with Engine(Settings(), {"f": fault_entry()}, {}, trust_file=path) as engine:
        await engine.pool.wait_settled()
        box = engine.toolbox()
    echo, delete = box.by_name["f.echo"], box.by_name["f.delete_file"]
    assert echo.hints.read_only and echo.trust == "ask"  # read-only by its annotations, yet not trusted blindly
    assert delete.trust == "never"
    assert "kept though the tool changed since" in delete.trust_source


def test_annotations_are_part_of_the_definition() -> None:
    schema = {"type": "object"}
    assert trustfile.definition_hash("d", schema, {"readOnlyHint": True}) != trustfile.definition_hash(
        "d", schema, {"readOnlyHint": False}
    )


@pytest.mark.anyio
async def test_a_trust_file_that_cannot_be_read_fails_closed(tmp_path: Path) -> None:
    """Broken while the engine runs: no recorded level raises a tool's trust (an `always` falls back to the default),
    what was recorded last may still lower it (a `never`, an `ask`), and the toolbox says why; fixed, they apply
    again."""
    path = tmp_path / "servers.trust.json"
    async with Engine(Settings(), {"f": fault_entry()}, {}, trust_file=path) as engine:
        await engine.pool.wait_settled()
        box = engine.toolbox()
        levels = {"f.delete_file": "always", "f.echo": "never", "f.pid": "ask"}
        trustfile.save(
            path,
            {
                name: trustfile.Recorded(level=level, definition=definition_of(box.by_name[name]), recorded="then")  # type: ignore[arg-type]
                for name, level in levels.items()
            },
        )
        assert {name: engine.toolbox().by_name[name].trust for name in levels} == levels

        path.write_text(path.read_text().replace('"level": "always",', '"level": "always",,'))  # a stray comma
        box = engine.toolbox()
        assert {name: box.by_name[name].trust for name in levels} == {
            "f.delete_file": "ask",
            "f.echo": "never",
            "f.pid": "ask",
        }
        assert box.by_name["f.delete_file"].trust_source == (
            "not read-only; the 'always' recorded for it does not apply: the trust file cannot be read"
        )
        assert box.by_name["f.echo"].trust_source == (
            "meta-agent trust 'never' as last read; the trust file cannot be read now"
        )
        assert re.fullmatch(
            rf"{re.escape(str(path))}:\d+:\d+: invalid JSON \(line \d+, column \d+\): an extra comma; .*",
            box.problems[0],
        )
        assert engine.toolbox.describe()["trust_file"] == {"path": str(path), "problem": box.problems[0]}

        path.write_text(path.read_text().replace(",,", ","))  # fixed
        assert {name: engine.toolbox().by_name[name].trust for name in levels} == levels
        assert engine.toolbox.trust_problem is None and not engine.toolbox().problems
