"""Another release of meta-agent installed beside this one, as the tests of deploys need it: the working tree's package
copied with another version (and, for a release whose durable-run format changed, one format more), first on the
PYTHONPATH of the replicas started from it (tests/replicas.py), so that two releases serve one database at once."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import meta_agent

PACKAGE = Path(meta_agent.__file__).parent
# What a release whose recorded shapes changed adds to durable/format.py: the next format, as the rule there says.
NEXT_FORMAT = """
# A later release (tests/releases.py), whose recorded shapes changed: one format more.
FORMATS = (*FORMATS, "a later release's shapes")
RUN_FORMAT = len(FORMATS)
APPLICATION_VERSION = f"run-format-{RUN_FORMAT}"
"""


@dataclass(frozen=True, kw_only=True)
class Release:
    version: str
    application_version: str  # its durable-run format's, which DBOS records its runs under
    environ: dict[str, str]  # what a process of it needs beside the test's own environment


def installed(where: Path, version: str, *, next_format: bool = False) -> Release:
    """The package copied under `where` as release `version` (of the next durable-run format, if `next_format`).
    Checked: a process with its environment runs that copy."""
    root = where / f"meta-agent-{version}"
    shutil.copytree(PACKAGE, root / "meta_agent", ignore=shutil.ignore_patterns("__pycache__"))
    stamp = root / "meta_agent" / "version.py"
    stamp.write_text(re.sub(r'__version__ = "[^"]*"', f'__version__ = "{version}"', stamp.read_text()))
    if next_format:
        with (root / "meta_agent" / "durable" / "format.py").open("a") as file:
            file.write(NEXT_FORMAT)
    environ = {"PYTHONPATH": str(root)}
    asked = "import meta_agent, meta_agent.durable.format as f; print(meta_agent.__version__, f.APPLICATION_VERSION)"
    said = subprocess.run(
        [sys.executable, "-c", asked],
        env={**os.environ, **environ},
        cwd=where,  # not the repository, whose directory would come first on the path
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    assert said[0] == version, said
    return Release(version=version, application_version=said[1], environ=environ)
