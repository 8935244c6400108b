"""A trust file nothing will read, and `meta-agent trust … forget`, which repairs it: the command line in this process
(no child is started: the commands refuse before, and `forget` needs none)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from meta_agent.cli.main import main
from meta_agent.store import trustfile

pytestmark = pytest.mark.quick

LEVEL = {"level": "always", "definition": "sha256:1", "recorded": "2026-01-01T00:00:00Z"}
Cli = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Cli:
    """`meta-agent ARGS --config tmp_path/servers.json` (no servers): exit code, stdout, stderr."""
    config = tmp_path / "servers.json"
    config.write_text('{"mcpServers": {}}')

    def run(*args: str) -> tuple[int, str, str]:
        code = main([*args, "--config", str(config)])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_a_trailing_comma_is_said_at_its_line_and_forget_starts_afresh(tmp_path: Path, cli: Cli) -> None:
    path = tmp_path / "servers.trust.json"
    broken = '{\n  "tools": {\n    "f.a": {"level": "always", "definition": "h"},\n  }\n}\n'
    path.write_text(broken)
    code, out, err = cli("check")
    assert (code, out) == (2, "")
    assert err == (
        f"meta-agent: {path}:3:50: invalid JSON (line 3, column 50): a trailing comma after the last item (JSON allows"
        " none): remove it; fix it, or start afresh: `meta-agent trust '*' forget` keeps it beside, renamed\n"
    )
    code, _, err = cli("trust", "f.a", "forget")  # one entry of a file whose entries cannot be told apart
    assert code == 2 and "invalid JSON (line 3, column 50)" in err
    assert path.read_text() == broken  # left as it was

    code, out, err = cli("trust", "*", "forget")
    assert (code, err) == (0, "")
    (aside,) = tmp_path.glob("servers.trust.json.broken-*")
    assert out == f"forgot every level: {path} could not be read, and is kept as {aside}\n"
    assert aside.read_text() == broken and not path.exists()
    assert cli("check")[0] == 0  # the commands start again


@pytest.mark.parametrize(
    "text", ["", "[]", '{"tools": []}', '{"tools": {"a": 1}', "\xff"], ids=["empty", "list", "tools-list", "cut", "x"]
)
def test_forget_all_sets_aside_any_file_that_is_not_a_trust_file(tmp_path: Path, cli: Cli, text: str) -> None:
    path = tmp_path / "servers.trust.json"
    path.write_text(text, encoding="latin-1")
    assert cli("trust", "*", "forget")[0] == (2 if text == "\xff" else 0)  # not UTF-8: cannot read, left alone
    assert path.exists() is (text == "\xff")


def test_forget_drops_a_broken_entry_and_keeps_the_others_as_they_are(tmp_path: Path, cli: Cli) -> None:
    path = tmp_path / "servers.trust.json"
    entries = {"f.a": {"level": "sometimes", "definition": "h"}, "f.b": LEVEL, "f.c": {"level": "ask", "x": [1]}}
    path.write_text(json.dumps({"tools": entries, "note": "mine"}))
    code, _, err = cli("check")
    assert code == 2
    assert err == (
        f"meta-agent: {path}: tools[\"f.a\"].level: input should be 'never', 'ask' or 'always', got \"sometimes\";"
        ' tools["f.c"].definition: required key is missing; fix it, or forget the entry: `meta-agent trust NAME'
        " forget`\n"
    )
    code, out, err = cli("trust", "f.a", "forget")  # f.c is still broken: said, exit 2
    assert (code, out) == (2, "forgot f.a\n")
    assert err.startswith(f'meta-agent: {path}: tools["f.c"].definition: required key is missing; fix it, or')
    assert err.endswith("`meta-agent trust f.c forget`\n")
    assert json.loads(path.read_text()) == {"tools": {"f.b": LEVEL, "f.c": entries["f.c"]}, "note": "mine"}
    assert cli("trust", "f.c", "forget")[:2] == (0, "forgot f.c\n")
    assert trustfile.load(path) == {"f.b": trustfile.Recorded(**LEVEL)}


def test_an_entry_named_to_break_the_line_is_not_offered_as_a_command(tmp_path: Path, cli: Cli) -> None:
    path = tmp_path / "servers.trust.json"
    path.write_text(json.dumps({"tools": {"f.a\nmeta-agent: all fine; rm -rf ~": {"level": "ask"}}}))
    code, _, err = cli("check")
    assert code == 2 and err.count("\n") == 1
    assert err.endswith("fix it, or forget the entry: `meta-agent trust NAME forget`\n")


def test_forget_of_nothing_recorded_says_so(tmp_path: Path, cli: Cli) -> None:
    assert cli("trust", "f.*", "forget") == (
        2,
        "",
        f"meta-agent: trust: nothing recorded matches 'f.*' in {tmp_path / 'servers.trust.json'}\n",
    )
