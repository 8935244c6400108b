"""A clone is self-contained and stays clean: the README, the documentation and the code point only at what the
repository holds, and the state a user's commands leave in the clone (the trust file, the venvs, the checkers' caches,
the built site) is ignored by git. The documentation holds what it generates and documents from the code."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import unicodedata
from pathlib import Path

import pytest
from conftest import TESTS

import meta_agent

ROOT = TESTS.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_LINES = 250  # what a user needs first; the rest is in docs/
# Where the project's own text lives (node_modules and the venvs are other people's).
OWN_TEXT = [
    "README.md",
    "pyproject.toml",
    ".gitignore",
    ".ci",
    "src",
    "tests",
    "examples",
    "scripts",
    "benchmarks",
    "docs",
    "mkdocs.yml",
]
SKIPPED_DIRS = {"node_modules", "__pycache__", "fixtures_data"}
TEXT_SUFFIXES = {".py", ".md", ".json", ".toml", ".sql", ".jsonl", ".yml", ""}
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


def test_the_readme_stays_short() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= README_LINES, f"README.md has {lines} lines; move what is not needed first into docs/"


def _anchor(heading: str) -> str:
    """The anchor MkDocs (Python-Markdown's toc) gives a heading: its text without markup, lower-cased, dashed."""
    text = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)  # a `# comment` in a code block is no heading
    return {_anchor(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda page: page.name)
def test_each_link_of_the_docs_names_a_page_and_a_heading_they_hold(page: Path) -> None:
    """What `mkdocs build --strict` checks, without MkDocs: a link stays inside docs/ (the site holds nothing else)
    and names a page of it (or a picture of docs/images, which the browser tests take) and, after `#`, one of that
    page's headings."""
    for target in LINK.findall(page.read_text()):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        linked = DOCS / path if path else page
        inside = linked.resolve().parent == DOCS.resolve() or linked.resolve().parent == (DOCS / "images").resolve()
        assert inside and linked.exists(), f"{page.name} links to {target}"
        assert not anchor or anchor in _anchors(linked), f"{page.name} links to {target}, which no heading is"


def test_every_page_is_in_the_site_navigation() -> None:
    listed = set(re.findall(r":\s*([\w-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), flags=re.MULTILINE))
    assert listed == {page.name for page in DOCS.glob("*.md")}


def test_the_embedding_page_documents_every_public_name() -> None:
    """Each `::: meta_agent` block of the page lists its members; together they are the package's `__all__`."""
    listed = re.findall(r"^\s+- (\w+)$", (DOCS / "embedding.md").read_text(), flags=re.MULTILINE)
    assert len(listed) == len(set(listed)), "a name is documented twice"
    assert set(listed) == set(meta_agent.__all__) - {"__version__"}


def test_the_settings_reference_is_what_the_settings_model_says() -> None:
    """docs/settings.md is generated: a setting added, removed or described anew changes the page (run
    scripts/settings_reference.py to write it again)."""
    spec = importlib.util.spec_from_file_location("settings_reference", ROOT / "scripts" / "settings_reference.py")
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    page = generator.render(meta_agent.Settings)
    assert (DOCS / "settings.md").read_text() == page, "docs/settings.md is stale: run scripts/settings_reference.py"
    for name in meta_agent.Settings.model_fields:
        assert f"## `META_AGENT_{name.upper()}`" in page


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
        "build/site/index.html",  # mkdocs build
    ]
    done = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "--no-index", "--verbose", "--non-matching", *local],
        capture_output=True,
        text=True,
        timeout=30,
    )
    not_ignored = [line.split("\t")[-1] for line in done.stdout.splitlines() if line.startswith("::")]
    assert not_ignored == [], not_ignored
    shipped = [
        "servers.json",
        "examples/servers.json",
        "examples/claude_desktop_config.json",
        "README.md",
        "docs/index.md",
        "mkdocs.yml",
    ]
    done = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "--no-index", *shipped], capture_output=True, text=True, timeout=30
    )
    assert done.stdout == "", f"shipped files ignored: {done.stdout}"
