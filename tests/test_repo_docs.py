"""A clone is self-contained and stays clean: the README and the code point only at what the repository holds, and
the state a user's commands leave in the clone (the trust file, the venvs, the checkers' caches) is ignored by git."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from conftest import TESTS

ROOT = TESTS.parent
README = ROOT / "README.md"
# Where the project's own text lives (node_modules and the venvs are other people's).
OWN_TEXT = ["README.md", "pyproject.toml", ".gitignore", ".ci", "src", "tests", "examples", "scripts", "benchmarks"]
SKIPPED_DIRS = {"node_modules", "__pycache__", "fixtures_data"}
TEXT_SUFFIXES = {".py", ".md", ".json", ".toml", ".sql", ".jsonl", ""}
# Documents outside the repository (spelled in two parts so this file does not match itself).
OUTSIDE = ["design" + ".md", "shared" + "/docs", "../" + "shared"]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_readme_points_only_at_what_the_repository_holds() -> None:
    """No path climbs out of the clone (`../`); every link names a file of the repository or a heading of the README."""
    text = README.read_text()
    climbing = [line for line in text.splitlines() if "`../" in line or "](../" in line]
    assert climbing == [], climbing
    anchors = {_slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://")):
            continue
        if target.startswith("#"):
            assert target[1:] in anchors, f"README links to #{target[1:]}, which no heading is"
        else:
            assert (ROOT / target).exists(), f"README links to {target}, which the repository does not hold"


def test_nothing_cites_a_document_outside_the_repository() -> None:
    cited: list[str] = []
    for top in OWN_TEXT:
        base = ROOT / top
        paths = [base] if base.is_file() else [p for p in base.rglob("*") if p.is_file()]
        for path in paths:
            if SKIPPED_DIRS & set(path.relative_to(ROOT).parts) or path.suffix not in TEXT_SUFFIXES:
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            for number, line in enumerate(text.splitlines(), 1):
                if any(name in line for name in OUTSIDE):
                    cited.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert cited == [], "\n".join(cited)


@pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and a clone of the repository"
)
def test_local_state_is_ignored() -> None:
    """What `meta-agent trust`, the set-up, the checkers and `meta-agent run` leave in a clone is not `git status`'s."""
    local = [
        "servers.trust.json",
        "examples/postgres/servers.trust.json",
        ".servers.trust.json.tmp3x9q",  # the trust file's temporary copy, before it is renamed over the old one
        ".venv/bin/python",
        ".venv-postgres-mcp/bin/postgres-mcp",
        ".venv-llama/bin/python",
        ".mypy_cache/3.11/x.json",
        ".ruff_cache/0.17.6/x",
        ".pytest_cache/v/x",
        "src/meta_agent/__pycache__/x.pyc",
        "tests/node_modules/x/package.json",
        "meta-agent-01KABCDEF-1.png",
    ]
    done = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "--no-index", "--verbose", "--non-matching", *local],
        capture_output=True,
        text=True,
        timeout=30,
    )
    not_ignored = [line.split("\t")[-1] for line in done.stdout.splitlines() if line.startswith("::")]
    assert not_ignored == [], not_ignored
    shipped = ["servers.json", "examples/servers.json", "examples/claude_desktop_config.json", "README.md"]
    done = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "--no-index", *shipped], capture_output=True, text=True, timeout=30
    )
    assert done.stdout == "", f"shipped files ignored: {done.stdout}"
