"""`meta-agent install HOST` and `uninstall HOST` on each host's own file, in a temporary HOME whose path has a space
and non-ASCII letters, run in this process with `--no-check` (the check starts meta-agent: tests/cli/
test_install_started.py). The user's file is never lost: other entries and keys stay, a backup is kept, what cannot be
changed safely is refused in one line naming the file, with nothing written."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from meta_agent.cli.main import main
from meta_agent.errors import ConfigError
from meta_agent.hosts import HOSTS, config_file
from meta_agent.hosts.config_file import BACKUP_SUFFIX
from meta_agent.hosts.entry import is_ours, read_variables
from meta_agent.hosts.host import Place

pytestmark = pytest.mark.quick

# Where each host's file is for the user, from HOME, on Linux (no XDG_CONFIG_HOME).
USER_FILES = {
    "claude-desktop": ".config/Claude/claude_desktop_config.json",
    "cursor": ".cursor/mcp.json",
    "vscode": ".config/Code/User/mcp.json",
    "claude-code": ".claude.json",
}
FILE_HOSTS = list(USER_FILES)
KEY = "sk-proj-0123456789abcdefghijklmnop"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home of Zoë"
    path.mkdir()
    monkeypatch.setenv("HOME", str(path))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    return path


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "my conf ü" / "servers.json"
    path.parent.mkdir()
    path.write_text('{"mcpServers": {}}')
    return path


def install(config: Path, *args: str) -> int:
    return main(["install", *args, "--config", str(config), "--no-check"])


def uninstall(*args: str) -> int:
    return main(["uninstall", *args])


def servers_of(host: str, path: Path) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(path.read_text())
    return value[HOSTS[host].servers_key]


def other_servers(host: str) -> str:
    """A file as the user has it: other servers and keys meta-agent knows nothing of."""
    key = HOSTS[host].servers_key
    return (
        f'{{\n  "theme": "dark",\n  "{key}": {{\n    "fs": {{"command": "npx", "args": ["-y", "fs"]}},\n'
        f'    "web": {{"type": "http", "url": "https://example.com/mcp"}}\n  }},\n  "numStartups": 7\n}}\n'
    )


@pytest.mark.parametrize("host", FILE_HOSTS)
def test_a_fresh_file_gets_the_entry_with_absolute_paths(host: str, home: Path, config: Path) -> None:
    assert install(config, host, "--env", f"OPENAI_API_KEY={KEY}") == 0
    path = home / USER_FILES[host]
    entry = servers_of(host, path)["meta-agent"]
    assert entry["command"] == os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "meta-agent")
    assert entry["args"] == ["serve", "--config", str(config)]
    assert entry["env"] == {"OPENAI_API_KEY": KEY}
    assert entry.get("type") == ("stdio" if HOSTS[host].typed else None)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # it holds a key
    assert not path.with_name(path.name + BACKUP_SUFFIX).exists()  # nothing to back up


@pytest.mark.parametrize("host", FILE_HOSTS)
def test_other_servers_stay_and_uninstall_gives_the_file_back(
    host: str, home: Path, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = home / USER_FILES[host]
    path.parent.mkdir(parents=True, exist_ok=True)
    original = other_servers(host)
    path.write_text(original)
    assert install(config, host) == 0
    value = json.loads(path.read_text())
    assert value["theme"] == "dark" and value["numStartups"] == 7
    assert set(servers_of(host, path)) == {"fs", "web", "meta-agent"}
    assert path.with_name(path.name + BACKUP_SUFFIX).read_text() == original
    assert uninstall(host) == 0
    assert path.read_text() == original
    assert "removed the entry 'meta-agent'" in capsys.readouterr().out


@pytest.mark.parametrize("host", FILE_HOSTS)
def test_a_second_install_replaces_its_entry_and_a_name_keeps_two(host: str, home: Path, config: Path) -> None:
    path = home / USER_FILES[host]
    assert install(config, host, "--env", "META_AGENT_MODEL=openai:a") == 0
    assert install(config, host, "--env", "META_AGENT_MODEL=openai:b") == 0
    assert {name: e["env"] for name, e in servers_of(host, path).items()} == {
        "meta-agent": {"META_AGENT_MODEL": "openai:b"}
    }
    assert install(config, host, "--name", "meta-agent-2") == 0
    assert set(servers_of(host, path)) == {"meta-agent", "meta-agent-2"}
    assert uninstall(host, "--name", "meta-agent-2") == 0
    assert set(servers_of(host, path)) == {"meta-agent"}


@pytest.mark.parametrize("host", FILE_HOSTS)
@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "not valid JSON"),
        ('{"mcpServers": [], "servers": []}', "is not an object (the host reads its servers there)"),
        (b"\xff\xfe{}", "not UTF-8 text (byte 0)"),
    ],
)
def test_a_file_that_is_not_the_hosts_shape_is_refused_and_left_alone(
    host: str, content: str | bytes, problem: str, home: Path, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = home / USER_FILES[host]
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = content if isinstance(content, bytes) else content.encode()
    path.write_bytes(raw)
    assert install(config, host) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"meta-agent: {path}: ") and problem in err, err
    assert path.read_bytes() == raw
    assert list(path.parent.iterdir()) == [path]  # no backup, no temporary file
    assert uninstall(host) == 2
    assert path.read_bytes() == raw


def test_vs_code_keeps_its_comments_and_trailing_commas(home: Path, config: Path) -> None:
    path = home / USER_FILES["vscode"]
    path.parent.mkdir(parents=True)
    original = (
        '{\n\t// mine\n\t"servers": {\n\t\t"gh": {"type": "http", "url": "https://x.example/mcp"}, // GitHub\n\t},\n}\n'
    )
    path.write_text(original)
    assert install(config, "vscode") == 0
    text = path.read_text()
    assert "// mine" in text and "// GitHub" in text and text.endswith("\t},\n}\n")
    assert uninstall("vscode") == 0
    assert path.read_text() == original


def test_a_host_that_reads_strict_json_refuses_comments(
    home: Path, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = home / USER_FILES["claude-desktop"]
    path.parent.mkdir(parents=True)
    path.write_text('{\n  // mine\n  "mcpServers": {}\n}\n')
    assert install(config, "claude-desktop") == 2
    assert "a comment at line 2 column 3, which this file may not have" in capsys.readouterr().err


@pytest.mark.parametrize("host", ["cursor", "claude-code"])
def test_a_symlinked_file_is_written_through_the_link(host: str, home: Path, config: Path, tmp_path: Path) -> None:
    target = tmp_path / "dotfiles" / "their file.json"
    target.parent.mkdir()
    target.write_text(other_servers(host))
    link = home / USER_FILES[host]
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    assert install(config, host) == 0
    assert link.is_symlink() and link.resolve() == target
    assert set(servers_of(host, target)) == {"fs", "web", "meta-agent"}
    assert target.with_name(target.name + BACKUP_SUFFIX).read_text() == other_servers(host)


def test_a_read_only_file_is_refused(home: Path, config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = home / USER_FILES["cursor"]
    path.parent.mkdir(parents=True)
    path.write_text(other_servers("cursor"))
    path.chmod(0o444)
    assert install(config, "cursor") == 2
    assert capsys.readouterr().err.strip() == (
        f"meta-agent: {path}: the file is read-only; nothing was written (make it writable to change it)"
    )
    assert path.read_text() == other_servers("cursor")


@pytest.mark.parametrize("make", [Path.mkdir, os.mkfifo])
def test_what_is_not_a_regular_file_is_refused_without_reading_it(
    make: Any, home: Path, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A directory, or a FIFO, whose reading would wait for a writer forever."""
    path = home / USER_FILES["cursor"]
    path.parent.mkdir(parents=True)
    make(path)
    assert install(config, "cursor") == 2
    assert capsys.readouterr().err.strip() == f"meta-agent: {path}: not a regular file"


def test_a_byte_order_mark_and_windows_line_breaks_are_kept(home: Path, config: Path) -> None:
    path = home / USER_FILES["claude-desktop"]
    path.parent.mkdir(parents=True)
    original = "\ufeff" + other_servers("claude-desktop").replace("\n", "\r\n")
    path.write_bytes(original.encode())
    assert install(config, "claude-desktop") == 0
    text = path.read_bytes().decode()
    assert text.startswith("\ufeff{\r\n") and "\n" not in text.replace("\r\n", "")
    assert uninstall("claude-desktop") == 0
    assert path.read_bytes() == original.encode()


def test_env_values_with_quotes_and_line_breaks_round_trip(
    home: Path, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tricky = "say \"hi\"\\n\nthen {'}' and \\u00e9 é\t ${NOT_EXPANDED}"
    assert install(config, "claude-code", "--env", f"GREETING={tricky}", "--env", f"ANTHROPIC_API_KEY={KEY}") == 0
    env = servers_of("claude-code", home / ".claude.json")["meta-agent"]["env"]
    assert env == {"GREETING": tricky, "ANTHROPIC_API_KEY": KEY}
    out = capsys.readouterr().out
    assert KEY not in out and "ANTHROPIC_API_KEY=sk-p… (34 characters)" in out
    assert "\n\nthen" not in out  # a line break of a value is shown escaped


def test_a_name_that_is_another_servers_is_replaced_only_with_force(
    home: Path, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = home / USER_FILES["claude-desktop"]
    path.parent.mkdir(parents=True)
    path.write_text(other_servers("claude-desktop"))
    assert install(config, "claude-desktop", "--name", "fs") == 2
    assert capsys.readouterr().err.strip() == (
        f"meta-agent: {path}: mcpServers.fs is another server's entry (command 'npx'); choose another --name,"
        " or give --force to replace it; nothing was written"
    )
    assert uninstall("claude-desktop", "--name", "fs") == 2
    assert path.read_text() == other_servers("claude-desktop")
    assert install(config, "claude-desktop", "--name", "fs", "--force") == 0
    assert is_ours(servers_of("claude-desktop", path)["fs"])


@pytest.mark.parametrize(
    ("host", "file"), [("cursor", ".cursor/mcp.json"), ("vscode", ".vscode/mcp.json"), ("claude-code", ".mcp.json")]
)
def test_project_scope(host: str, file: str, home: Path, config: Path, tmp_path: Path) -> None:
    project = tmp_path / "a project"
    project.mkdir()
    assert install(config, host, "--project", str(project)) == 0
    assert "meta-agent" in servers_of(host, project / file)
    assert not (home / USER_FILES[host]).exists()


def test_claude_desktop_has_no_project_scope(home: Path, config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert install(config, "claude-desktop", "--project", str(home)) == 2
    assert capsys.readouterr().err.strip() == (
        "meta-agent: --project: Claude Desktop has no project scope; its file is for this user"
    )


def test_mcp_json_prints_the_entry_with_its_keys_masked(
    home: Path, config: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert install(config, "mcp-json", "--env", f"OPENAI_API_KEY={KEY}", "--env", "META_AGENT_MODEL=openai:x") == 0
    out, err = capsys.readouterr()
    printed = json.loads(out)["mcpServers"]["meta-agent"]
    assert printed["env"] == {"OPENAI_API_KEY": "sk-p… (34 characters)", "META_AGENT_MODEL": "openai:x"}
    assert KEY not in out + err and "give --file PATH to write the entry whole" in err
    file = tmp_path / "any host.json"
    assert install(config, "mcp-json", "--file", str(file), "--env", f"OPENAI_API_KEY={KEY}") == 0
    assert servers_of("mcp-json", file)["meta-agent"]["env"] == {"OPENAI_API_KEY": KEY}
    assert uninstall("mcp-json", "--file", str(file)) == 0
    assert servers_of("mcp-json", file) == {}


def test_env_from_shell_takes_only_what_meta_agent_reads(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "servers.json"
    config.write_text('{"mcpServers": {"gh": {"command": "gh-mcp", "env": {"T": "${GH_TOKEN}"}}}}')
    for name in os.environ:  # the suite's own (its trace directory) and whatever this shell has
        if name.startswith("META_AGENT_") or name in read_variables(config.read_text()):
            monkeypatch.delenv(name)
    for name, value in {
        "META_AGENT_MODEL": "anthropic:claude-sonnet-5-5",
        "ANTHROPIC_API_KEY": KEY,
        "OLLAMA_HOST": "127.0.0.1:11434",
        "GH_TOKEN": "ghp_x",
        "AWS_SECRET_ACCESS_KEY": "not ours",
        "META_AGENT_CONFIG": str(config),
        "GEMINI_API_KEY": "",  # set but empty: not taken
    }.items():
        monkeypatch.setenv(name, value)
    assert main(["install", "cursor", "--env-from-shell", "--env", "OLLAMA_HOST=elsewhere:1", "--no-check"]) == 0
    env = servers_of("cursor", home / USER_FILES["cursor"])["meta-agent"]["env"]
    assert env == {
        "META_AGENT_MODEL": "anthropic:claude-sonnet-5-5",
        "ANTHROPIC_API_KEY": KEY,
        "OLLAMA_HOST": "elsewhere:1",  # --env wins
        "GH_TOKEN": "ghp_x",  # servers.json expands it
    }


@pytest.mark.parametrize(
    ("option", "problem"),
    [
        ("MY KEY=sk-secret", "--env: 'MY KEY' is no variable name (expected KEY=VALUE)"),
        ("K=a\0b", "--env K: a value cannot hold a NUL character"),
        ("NOT_SET_HERE", "--env NOT_SET_HERE: NOT_SET_HERE is not set here (give --env NOT_SET_HERE=VALUE)"),
    ],
)
def test_a_bad_env_option_is_one_line(
    option: str, problem: str, home: Path, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert install(config, "cursor", "--env", option) == 2
    assert capsys.readouterr().err.strip() == f"meta-agent: {problem}"
    assert not (home / ".cursor").exists()


def test_a_missing_servers_json_is_refused_before_anything_is_written(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert install(tmp_path / "nowhere.json", "cursor") == 2
    assert "nowhere.json: no such file" in capsys.readouterr().err
    assert not (home / ".cursor").exists()


def test_a_change_by_the_host_meanwhile_is_theirs(home: Path) -> None:
    """The host writes its file between meta-agent's read and its rename: the host's version stays."""
    path = home / "mcp.json"
    path.write_text('{"mcpServers": {}}')
    read = config_file.read(path, comments=False)
    path.write_text('{"mcpServers": {"theirs": {"command": "x"}}}')
    with pytest.raises(ConfigError, match="changed while meta-agent was writing it"):
        config_file.write(read, '{"mcpServers": {"meta-agent": {"command": "m"}}}')
    assert path.read_text() == '{"mcpServers": {"theirs": {"command": "x"}}}'
    assert sorted(p.name for p in home.iterdir()) == ["mcp.json"]


def test_uninstall_with_no_entry_changes_nothing(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert uninstall("cursor") == 0
    assert "has no entry 'meta-agent'; nothing changed" in capsys.readouterr().out
    assert not (home / ".cursor").exists()


def test_where_each_host_reads_its_file_on_each_system(tmp_path: Path) -> None:
    places = {
        "linux": Place(system="linux", home=Path("/home/u"), app_data=Path("/home/u/.config")),
        "darwin": Place(system="darwin", home=Path("/Users/u"), app_data=Path("/Users/u/Library/Application Support")),
        "win32": Place(system="win32", home=Path("C:/Users/u"), app_data=Path("C:/Users/u/AppData/Roaming")),
    }
    found = {
        (system, name): str(host.user_file(place))
        for system, place in places.items()
        for name, host in HOSTS.items()
        if host.user_file is not None
    }
    assert found == {
        ("linux", "claude-desktop"): "/home/u/.config/Claude/claude_desktop_config.json",
        ("linux", "cursor"): "/home/u/.cursor/mcp.json",
        ("linux", "vscode"): "/home/u/.config/Code/User/mcp.json",
        ("linux", "claude-code"): "/home/u/.claude.json",
        ("darwin", "claude-desktop"): "/Users/u/Library/Application Support/Claude/claude_desktop_config.json",
        ("darwin", "cursor"): "/Users/u/.cursor/mcp.json",
        ("darwin", "vscode"): "/Users/u/Library/Application Support/Code/User/mcp.json",
        ("darwin", "claude-code"): "/Users/u/.claude.json",
        ("win32", "claude-desktop"): "C:/Users/u/AppData/Roaming/Claude/claude_desktop_config.json",
        ("win32", "cursor"): "C:/Users/u/.cursor/mcp.json",
        ("win32", "vscode"): "C:/Users/u/AppData/Roaming/Code/User/mcp.json",
        ("win32", "claude-code"): "C:/Users/u/.claude.json",
    }


def test_this_machines_place_follows_xdg_config_home(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert Place.here().app_data == home / ".config"
    monkeypatch.setenv("XDG_CONFIG_HOME", "/elsewhere/config")
    assert Place.here().app_data == Path("/elsewhere/config")


@pytest.mark.parametrize(
    ("entry", "ours"),
    [
        ({"command": "/x/.venv/bin/meta-agent", "args": ["serve"]}, True),
        ({"command": "C:\\venv\\Scripts\\meta-agent.exe"}, True),
        ({"command": "/usr/bin/python3.11", "args": ["-m", "meta_agent", "serve"]}, True),
        ({"command": "/usr/bin/python3", "args": ["-m", "other"]}, False),
        ({"command": "npx", "args": ["meta-agent"]}, False),
        ({"url": "https://x/mcp"}, False),
        ("meta-agent", False),
    ],
)
def test_which_entries_are_meta_agents(entry: Any, ours: bool) -> None:
    assert is_ours(entry) is ours
