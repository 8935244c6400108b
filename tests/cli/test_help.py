"""What the command line says of itself to a newcomer: each command's help, and which run history `runs` reads."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from meta_agent.cli.main import _parser, main

pytestmark = pytest.mark.quick


def help_of(command: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as stopped:
        _parser().parse_args([command, "--help"])
    assert stopped.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # as one line: argparse wraps to the terminal's width


def test_serve_says_what_it_is_and_what_each_transport_is(capsys: pytest.CaptureFixture[str]) -> None:
    said = help_of("serve", capsys)
    assert "Serve meta-agent as an MCP server: its tools ask, plan, agent and image_gen run the model" in said
    assert "--transport {stdio,http} stdio: a host starts this process and speaks MCP on its stdin and stdout" in said
    assert "http: streamable HTTP at /mcp on --host and --port" in said
    assert "--port PORT HTTP: port (default 8765)" in said


def test_the_model_help_says_how_to_go_without_a_key(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("run", "check", "serve"):
        said = help_of(command, capsys)
        assert "no key needed for a server on this machine: OPENAI_BASE_URL=http://127.0.0.1:8080/v1" in said, command
        assert "META_AGENT_MODEL=openai:NAME (llama.cpp's llama-server, or any OpenAI-compatible one)" in said


def test_check_says_it_checks_the_model(capsys: pytest.CaptureFixture[str]) -> None:
    said = help_of("check", capsys)
    assert "Check the model settings (the provider known, its key set, a server on this machine" in said
    assert "exit 1 when no model could serve a run or a child failed" in said


def test_trust_says_forget_repairs_a_broken_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert "(`'*' forget` also sets aside a trust file that cannot be read)" in help_of("trust", capsys)


def test_runs_says_which_history_it_reads(capsys: pytest.CaptureFixture[str]) -> None:
    said = help_of("runs", capsys)
    assert "META_AGENT_TRACE_DIR, else this user's (shared by every checkout" in said
    assert "Set either to read another history." in said


@pytest.mark.skipif(sys.platform != "linux", reason="platformdirs finds the state directory by XDG_STATE_HOME here")
def test_the_runs_listing_names_its_history_and_how_to_read_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("META_AGENT_TRACE_DIR", raising=False)
    monkeypatch.delenv("META_AGENT_DATABASE_URL", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert main(["runs"]) == 0
    assert capsys.readouterr().out == (
        f"{tmp_path / 'meta-agent' / 'traces'}: 0 recent runs (this user's, from every checkout and host;"
        " META_AGENT_TRACE_DIR=DIR reads the traces in DIR)\n"
    )
    monkeypatch.setenv("META_AGENT_TRACE_DIR", str(tmp_path))
    assert main(["runs"]) == 0
    assert (
        capsys.readouterr().out
        == f"{tmp_path}: 0 recent runs (the traces in META_AGENT_TRACE_DIR; unset, this user's)\n"
    )
