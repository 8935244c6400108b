"""The quick tier: `scripts/test --quick` (`pytest --quick`) runs only the tests that run in this process and start
no other: the core, the providers against fake endpoints on 127.0.0.1 (served from threads), the front in memory,
the loop with child servers in memory (fixtures/tool_double.py). Starting processes is what makes the full suite
take minutes.

A module joins the tier with the mark `quick` (`pytestmark = [pytest.mark.anyio, pytest.mark.quick]`), a single test
with `@pytest.mark.quick`; a test of a quick module that must start a process (a child server, meta-agent itself, a
second interpreter) stays out with `@pytest.mark.processes`. In every run, the full one too, a test of the tier that
starts a process fails, naming what it started, so the tier stays quick as the tests change (not for the processes
of the session's fixtures, which the last test's teardown ends: tests/repo/test_quick_tier_guard.py).
"""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

# Every way a test starts a process; asyncio's and anyio's subprocesses go through subprocess.Popen too.
_SPAWNERS = (
    (subprocess.Popen, "_execute_child"),
    (os, "fork"),
    (os, "posix_spawn"),
    (os, "posix_spawnp"),
    (os, "system"),
)

# The first platform.processor() runs `uname -p` and keeps its answer; the openai SDK's request headers ask for it
# (platform.platform()). Asked here, before any test, so that the test that happens to ask first is not failed for it.
platform.processor()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--quick", action="store_true", help="run the quick tier only: the tests marked quick and not processes"
    )


_run = {"quick": False}


def pytest_configure(config: pytest.Config) -> None:
    _run["quick"] = bool(config.getoption("--quick"))


def only_quick() -> bool:
    """Whether this run is of the quick tier only (--quick): what the other tests need (the npm child servers,
    PostgreSQL) may be missing, though a module builds their entries as it is imported."""
    return _run["quick"]


def in_quick_tier(item: pytest.Item) -> bool:
    return item.get_closest_marker("quick") is not None and item.get_closest_marker("processes") is None


def keep_the_quick_tier(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under --quick, deselect every test outside the tier."""
    if not config.getoption("--quick"):
        return
    outside = [item for item in items if not in_quick_tier(item)]
    if outside:
        config.hook.pytest_deselected(items=outside)
        items[:] = [item for item in items if in_quick_tier(item)]


@contextmanager
def _refusing_processes(started: list[str]) -> Iterator[None]:
    """Every way to start a process refuses, and the command is noted in `started`."""
    real = [getattr(owner, name) for owner, name in _SPAWNERS]

    def refuse(*args: Any, **_kwargs: Any) -> Any:
        command = next((a for a in args if isinstance(a, (str, bytes, list, tuple))), "a fork")
        started.append(command if isinstance(command, str) else " ".join(map(str, command)))
        raise OSError(f"a test of the quick tier may start no process: {started[-1]}")

    for owner, name in _SPAWNERS:
        setattr(owner, name, refuse)
    try:
        yield
    finally:
        for (owner, name), function in zip(_SPAWNERS, real, strict=True):
            setattr(owner, name, function)


def _phase(item: pytest.Item) -> Generator[None, object, object]:
    """One phase of a test (setup, call, teardown); a test of the tier may start no process in it."""
    if not in_quick_tier(item):
        return (yield)
    started: list[str] = []
    with _refusing_processes(started):
        try:
            return (yield)
        finally:
            if started:  # whatever the test made of the refusal, the process is the news
                pytest.fail(
                    f"a test of the quick tier started a process: {started[0]} (mark it processes)", pytrace=False
                )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _phase(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _phase(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    if nextitem is None:  # the last test's teardown also ends the session's fixtures (a PostgreSQL cluster a test
        return (yield)  # of another tier started and stops with a process): not the test's processes, let them be
    return (yield from _phase(item))
