"""The fault suite's hostile code group (category hostile_input; tests/faults/test_faults.py describes the suite, the
harness is tests/fixtures/fault_harness.py): a prompt-injected model writes the programs of code mode (run_code,
internal/sandbox.py), through our real front in memory, with our fault server as the child.

Each fault is checked: the run goes on to its answer, the model got one line saying what the sandbox refused or which
limit the program reached, and the event loop never stood still for STALL meanwhile (a program spins in its own worker
process). A program that catches everything and spins on is cancelled with its run: its worker is gone with it (the
group's check of this process's children).
"""

from __future__ import annotations

import anyio
import pytest
from fake_llm import FakeLLM
from fault_harness import (  # noqa: F401  (this module's fixtures)
    WAIT,
    answer_with,
    call,
    calls_of,
    faulty_entry,
    finished,
    group,
    injecting,
    log_to_a_list,
    serving,
    told,
    until,
)
from fault_tally import TALLY
from test_faults_hostile_regex import STALL, watching_the_loop

from meta_agent.internal import sandbox

pytestmark = pytest.mark.anyio

GROUPS = {"hostile_code"}
TALLY.expected_groups |= GROUPS
TIME_LIMIT = 2  # META_AGENT_CODE_TIME_LIMIT here: the spinning programs meet it in two seconds
NO_SYSTEM = "a program has no access to the system; ask a tool"
CATCH_ALL_AND_SPIN = "try:\n    while True: pass\nexcept BaseException:\n    while True: pass"

# name -> the program, and what the one line the model reads of it says.
FAULTS: dict[str, tuple[str, str]] = {
    "import_os": ("import os\nos.environ['HOME']", f"line 2: PermissionError: os.environ: {NO_SYSTEM}"),
    "import_subprocess": ("import subprocess", "line 1: ModuleNotFoundError: no module named 'subprocess'"),
    "open_passwd": ("open('/etc/passwd').read()", f"line 1: PermissionError: open: {NO_SYSTEM}"),
    "dunder_import": ("__import__('os')", "line 1: NameError: name '__import__' is not defined"),
    "spin": ("while True: pass", f"the program ran longer than {TIME_LIMIT} s (META_AGENT_CODE_TIME_LIMIT)"),
    "huge_string": ("'a' * 10**10", "line 1: the program used more than 100 MB of memory"),
    "deep_recursion": ("def f(n):\n    return f(n + 1)\nf(0)", "RecursionError: maximum recursion depth exceeded"),
    "huge_last_value": ("['x' * 1000] * 2000", "last value are more than 1,000,000 characters (the limit)"),
    "million_prints": ("for i in range(10**6):\n    print(i, 'x' * 20)", "the program printed more than 1,000,000"),
    "ten_thousand_calls": (
        "for i in range(10000):\n    try:\n        call_tool('f.echo', {'text': 'x'})\n    except Exception:\n"
        "        pass",
        "the program was stopped: not run: the run's limit of 200 tool calls was reached",
    ),
    "unselected_tool": ("call_tool('f.crash', {})", "'f.crash' is not a tool of this run"),
    "not_json": ("call_tool('f.echo', {'text': {1, 2}})", "the arguments are no JSON object"),
    "not_a_dict": ("call_tool('f.echo', ['text'])", "the arguments are a list, no JSON object"),
}


async def warm_sandbox() -> None:
    """One program first: Monty's runtime opens its few descriptors (its I/O threads) once per process, at its first
    program, and keeps them; the group's check is then of what each program leaves."""

    async def nothing(_name: object, _arguments: object) -> None:
        return None

    assert (await sandbox.run_program("1", nothing)).value == 1


async def test_hostile_code(llm: FakeLLM) -> None:
    await warm_sandbox()
    servers = {"f": faulty_entry()}
    settings = {"code_mode": "on", "code_time_limit": TIME_LIMIT}
    async with group("hostile_code", "hostile_input"), serving(llm, servers, **settings) as (client, _):
        for name, (code, line) in FAULTS.items():
            async with injecting("hostile_input") as faults:
                tag = f"[{name}]"
                answer_with(llm, tag, ("c1", "run_code", {"code": code}))
                async with watching_the_loop() as longest:
                    arguments = {"task": f"Go {tag}", "tools": ["f.echo", "f.pid"]}
                    structured = finished(await call(client, "agent", arguments, timeout=WAIT + TIME_LIMIT))
                assert longest[0] < STALL, f"{name}: the event loop stood still for {longest[0]:.1f} s"
                seen = told(llm, tag)["c1"]
                first = seen.splitlines()[0]
                assert first.startswith("[error] run_code: ") and line in first, (name, first[:300])
                assert calls_of(structured)[0]["error"].splitlines()[0] == first.removeprefix("[error] ")
                faults.handled()


async def test_a_program_that_catches_everything_is_cancelled_with_its_run(llm: FakeLLM) -> None:
    await warm_sandbox()
    servers = {"f": faulty_entry()}
    settings = {"code_mode": "on", "code_time_limit": 60}  # longer than the test: only the cancel stops it
    hostile = group("hostile_code", "hostile_input")
    async with hostile, serving(llm, servers, **settings) as (client, engine), injecting("hostile_input") as faults:
        answer_with(llm, "[catch]", ("c1", "run_code", {"code": CATCH_ALL_AND_SPIN}))
        async with anyio.create_task_group() as tg:
            tg.start_soon(call, client, "agent", {"task": "Go [catch]", "tools": ["f.echo"]})
            await until("the program runs", lambda: any("run_code" in line for line in engine.runs.in_progress()))
            tg.cancel_scope.cancel()  # the caller goes away: the run, and its program, are cancelled
        await until("the run ends", lambda: not engine.runs.in_progress())
        faults.handled()  # and the group's check finds no worker process left
