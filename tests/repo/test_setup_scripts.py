"""The set-up scripts say what they are doing: `scripts/test`, `scripts/lint` and `scripts/bench` print a line on
stderr before each install that can take a while (making the venv, pip, npm, the PostgreSQL example's server, Phoenix), so a
first run is never silent for a minute.

Each script runs as it is, from a copy of the repository's layout in a temporary directory, where the programs it
starts are stand-ins that only say they ran: the real installs take a minute and the network."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from conftest import TESTS

ROOT = TESTS.parent
# What an install a stand-in ran looks like on stderr.
INSTALL = re.compile(r"RAN (python3 -m venv|python -m pip install|npm |install-server|install-phoenix)")
# A stand-in: it says on stderr that it ran and with what, and does nothing else.
STAND_IN = '#!/bin/sh\necho "RAN $(basename "$0") $*" >&2\n'
# python3 makes the venv it is asked for, with stand-ins for the programs the scripts run from it.
PYTHON3 = """#!/bin/sh
echo "RAN python3 $*" >&2
if [ "$1 $2" = "-m venv" ]; then
    mkdir -p "$3/bin"
    for name in python ruff mypy; do cp "$(dirname "$0")/stand-in" "$3/bin/$name"; chmod +x "$3/bin/$name"; done
fi
"""


def _executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def clone(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The scripts in a repository layout of their own, and an environment whose PATH finds the stand-ins first."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "scripts", repo / "scripts", ignore=shutil.ignore_patterns("__pycache__"))
    _executable(repo / "examples" / "postgres" / "install-server", STAND_IN)
    _executable(repo / "scripts" / "install-phoenix", STAND_IN)
    bin_dir = tmp_path / "bin"
    _executable(bin_dir / "stand-in", STAND_IN)
    _executable(bin_dir / "npm", STAND_IN)
    _executable(bin_dir / "chromium", STAND_IN)  # found, so scripts/test installs no Chromium with apt-get
    _executable(bin_dir / "python3", PYTHON3)
    return repo, {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def _said_before_each_step(script: str, clone: tuple[Path, dict[str, str]]) -> list[str]:
    """Run `script` in the clone; check every install that ran was announced on the line before; return its lines."""
    repo, environ = clone
    done = subprocess.run([str(repo / "scripts" / script)], capture_output=True, text=True, env=environ, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    steps = [i for i, line in enumerate(lines) if INSTALL.match(line)]
    assert steps, done.stderr
    for i in steps:
        assert i > 0 and lines[i - 1].startswith(f"scripts/{script}: "), f"no line before {lines[i]!r}:\n{done.stderr}"
    return lines


@pytest.mark.parametrize("script", ["test", "lint", "bench"])
def test_a_first_run_says_each_step_before_it_starts(script: str, clone: tuple[Path, dict[str, str]]) -> None:
    lines = _said_before_each_step(script, clone)
    assert lines[0] == f"scripts/{script}: creating .venv"
    assert any(line.startswith("RAN python -m pip install") for line in lines), lines


def test_scripts_test_names_every_install(clone: tuple[Path, dict[str, str]]) -> None:
    lines = _said_before_each_step("test", clone)
    said = [line.removeprefix("scripts/test: ") for line in lines if line.startswith("scripts/test: ")]
    assert [line.split(" (")[0] for line in said] == [
        "creating .venv",
        "installing meta-agent and its test extras into .venv",
        "installing the npm child servers, the aimock LLM emulator, the TypeScript SDK's client and the MCP Apps SDK"
        " into tests/node_modules",
        "installing the PostgreSQL example's server into .venv-postgres-mcp",
        "installing Arize Phoenix into .venv-phoenix",
        "running pytest",
    ]
