"""The fault suite: process lifecycle. Every child is a family of processes (tests/fixtures/family.py: a shell
wrapper, a launcher, a server whose helper holds its pipes, one whose helper also ignores SIGTERM), each marked in
its command line, and every fault meets every kind, all families of a group at once: a family's direct process or its
server is killed or sent SIGTERM, or the server crashes in a call (the child must come back as a new family, and the
old family be gone by pid); a family is idle, frozen in a call, or stopped with SIGSTOP when our front shuts down; or
it is killed where no restart follows, as in `meta-agent run` and `check` (no process of it may be left). Orphans are
no longer our descendants, so the harness's own leak check cannot see them: they are found by their markers.
"""

from __future__ import annotations

import itertools
import os
import signal
import uuid

import anyio
import pytest
from conftest import openai_env, processes_with
from fake_llm import FakeLLM
from family import KINDS, entry
from fault_harness import (  # noqa: F401  (this module's fixtures)
    MODEL,
    WAIT,
    Injection,
    group,
    injecting,
    log_to_a_list,
    pid_of,
    serving,
    until,
)
from fault_tally import TALLY

from meta_agent.children.supervisor import ChildServer
from meta_agent.config.servers import ServerEntry
from meta_agent.config.settings import Settings
from meta_agent.engine import Engine
from meta_agent.errors import ChildDied

pytestmark = pytest.mark.anyio

CATEGORY = "process_lifecycle"
GROUPS = {"lifecycle_restart", "lifecycle_stop", "lifecycle_no_restart"}
TALLY.expected_groups |= GROUPS

# Every fault meets every kind of family; the families of a group are all faulted at once.
RESTART_FAULTS = ("kill_leader", "term_leader", "kill_server", "crash")
STOP_STATES = ("idle", "frozen", "sigstop")
FINAL_KILLS = ("kill_leader", "kill_server")
# A SIGKILLed process dies a moment after the signal.
DYING = 5.0
# The front returns only once every family has been ended; this is the moment a process signalled last takes to die,
# far shorter than the stop's own grace periods (2 s each), so a front that did not wait for them fails the check.
AFTER_THE_FRONT = 1.0


def families(faults: list[tuple[str, str]]) -> tuple[str, dict[str, ServerEntry], dict[str, str]]:
    """For each (kind, fault): a family of that kind, named f0, f1, ... and marked `MARKER-NAME-`; and its fault."""
    marker = f"lifecycle-{uuid.uuid4().hex}"
    servers = {f"f{i}": ServerEntry(**entry(kind, f"{marker}-f{i}-")) for i, (kind, _) in enumerate(faults)}
    return marker, servers, {f"f{i}": fault for i, (_, fault) in enumerate(faults)}


def family_of(marker: str, name: str) -> set[int]:
    return set(processes_with(f"{marker}-{name}-"))


async def gone(marker: str, name: str, within: float = DYING) -> None:
    await until(f"the family of {name} to be gone", lambda: not family_of(marker, name), within)


async def test_a_child_whose_family_is_hit_comes_back_as_a_new_family(llm: FakeLLM) -> None:
    marker, servers, faulted = families(list(itertools.product(KINDS, RESTART_FAULTS)))
    async with (
        group("lifecycle_restart", CATEGORY),
        serving(llm, servers) as (_client, engine),
        injecting(CATEGORY, len(servers)) as faults,
        anyio.create_task_group() as tg,
    ):
        for name in servers:
            tg.start_soon(_hit_and_come_back, engine.pool[name], marker, faulted[name], faults)


async def _hit_and_come_back(child: ChildServer, marker: str, fault: str, faults: Injection) -> None:
    server = await pid_of(child)
    old = family_of(marker, child.name)
    assert server in old and len(old) == 2, (child.name, old)
    if fault == "crash":
        with pytest.raises(ChildDied), anyio.fail_after(WAIT):
            await child.call("crash", {"how": "exit"})
    else:
        target = server if fault == "kill_server" else os.getpgid(server)
        os.kill(target, signal.SIGTERM if fault == "term_leader" else signal.SIGKILL)
    back = f"{child.name} ({fault}) to come back"
    await until(back, lambda: (child.status.state, child.status.restarts) == ("ready", 1))
    await until(f"the old family of {child.name} ({fault}) to be gone", lambda: not old & family_of(marker, child.name))
    assert await pid_of(child) != server
    faults.handled()


async def test_no_family_outlives_the_front_whatever_state_it_is_in(llm: FakeLLM) -> None:
    marker, servers, states = families(list(itertools.product(KINDS, STOP_STATES)))
    async with group("lifecycle_stop", CATEGORY), injecting(CATEGORY, len(servers)) as faults:
        async with serving(llm, servers) as (_client, engine), anyio.create_task_group() as calls:
            for name, state in states.items():
                child = engine.pool[name]
                server = await pid_of(child)
                if state == "frozen":  # the server blocks its whole process: it never sees its stdin close
                    calls.start_soon(child.call, "freeze", {})
                elif state == "sigstop":  # only SIGKILL reaches a stopped process
                    os.killpg(os.getpgid(server), signal.SIGSTOP)
            await anyio.wait_all_tasks_blocked()  # each freeze request is in its child's stdin pipe, before the end
            calls.cancel_scope.cancel()
        for name in servers:
            await gone(marker, name, AFTER_THE_FRONT)
            faults.handled()


async def test_without_restarts_a_killed_child_takes_its_family_along(llm: FakeLLM) -> None:
    """As `meta-agent run` and `check` start children: the child fails, and nothing of its family is left."""
    marker, servers, kills = families(list(itertools.product(KINDS, FINAL_KILLS)))
    engine = Engine(Settings(model=MODEL), servers, openai_env(llm), restart=False)
    async with group("lifecycle_no_restart", CATEGORY), injecting(CATEGORY, len(servers)) as faults, engine:
        with anyio.fail_after(WAIT):
            await engine.pool.wait_settled()
        async with anyio.create_task_group() as tg:
            for name in servers:
                tg.start_soon(_kill_for_good, engine.pool[name], marker, kills[name], faults)


async def _kill_for_good(child: ChildServer, marker: str, kill: str, faults: Injection) -> None:
    server = await pid_of(child)
    os.kill(server if kill == "kill_server" else os.getpgid(server), signal.SIGKILL)
    await until(f"{child.name} to fail", lambda: child.status.state == "failed")
    await gone(marker, child.name)
    faults.handled()
