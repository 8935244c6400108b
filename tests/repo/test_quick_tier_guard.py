"""The quick tier's guard (tests/quick_tier.py), run on a small suite of its own in a new pytest process: a quick
test that starts a process fails, in its own fixtures' teardown too; but the last test's teardown, which also ends
the session's fixtures (a PostgreSQL cluster another test started), is not blamed for their processes, which then
run and end as they should."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import TESTS

CONFTEST = """
import subprocess, sys
from pathlib import Path
import pytest
from quick_tier import pytest_addoption, pytest_configure, pytest_runtest_call, pytest_runtest_setup
from quick_tier import pytest_runtest_teardown

ENDED = Path(__file__).with_name("ended")

@pytest.fixture(scope="session")
def cluster():
    yield
    subprocess.run([sys.executable, "-c", f"open({str(ENDED)!r}, 'w').close()"], check=True)

@pytest.fixture
def own():
    yield
    subprocess.run([sys.executable, "-c", "pass"], check=True)
"""
TESTS_OF_THE_SUITE = """
import pytest

def test_uses_the_cluster(cluster):
    pass

@pytest.mark.quick
def test_quick_with_a_process_of_its_own(own):
    pass

@pytest.mark.quick
def test_quick_and_last():
    pass
"""


def test_the_guard_blames_a_quick_tests_own_processes_not_the_sessions(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_suite.py").write_text(TESTS_OF_THE_SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    quick: q\n    processes: p\n")
    environ = {**os.environ, "PYTHONPATH": str(TESTS)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", str(tmp_path)],
        capture_output=True,
        text=True,
        env=environ,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.stdout.splitlines()[-1].startswith("3 passed, 1 error "), done.stdout
    assert "ERROR at teardown of test_quick_with_a_process_of_its_own" in done.stdout, done.stdout
    assert (tmp_path / "ended").exists(), done.stdout  # the session's fixture ran its process and ended
