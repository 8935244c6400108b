"""The fault suite's hostile parking group (tests/faults/test_faults.py describes the suite; the harness is
tests/fixtures/fault_harness.py).

hostile_parked: a prompt-injected model makes every run of a 2026-07-28 caller ask to run an `ask`-level tool, and
nobody answers: FLOOD calls through our real front in memory, with META_AGENT_MAX_PARKED=CAP. CAP runs park; every
other call gets the one line that names the setting, and its run ends there (its trace ended, cancelled). While CAP
runs wait, this process holds no more file descriptors than before but one (the trace directory's writer lock), and
a call that needs no answer completes; its model sends an argument of several MB, which its trace holds cut to 1 MB
with a marker giving the length.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import mcp.types as t
import psutil
import pytest
from conftest import fault_entry, openai_env
from fake_llm import FakeLLM, openai_reply
from fault_harness import MODEL, WAIT, group, injecting, log_to_a_list  # noqa: F401  (this module's fixtures)
from fault_tally import TALLY
from mcp import Client

from meta_agent.config.settings import Settings
from meta_agent.front.server import build_server

pytestmark = pytest.mark.anyio

GROUPS = {"hostile_parked"}
TALLY.expected_groups |= GROUPS
CATEGORY = "hostile_input"

CAP = 25
FLOOD = 40
BIG = 3_000_000  # characters of the hostile argument
MAX_VALUE_BYTES = 1_000_000
REFUSAL = (
    f"the run needs an answer, but {CAP} runs already wait for one (META_AGENT_MAX_PARKED); "
    "answer or abandon one of them, or call again later"
)


async def nobody(_ctx: Any, _params: Any) -> t.ElicitResult:  # declares the capability; the rounds go by hand
    raise AssertionError("the test drives the rounds itself")


async def test_hostile_parked(llm: FakeLLM, tmp_path: Path) -> None:
    settings = Settings(model=MODEL, max_parked=CAP, trace_dir=tmp_path, conversations_db=tmp_path / "c.db")
    server = build_server(settings, {"f": fault_entry()}, openai_env(llm))
    for n in range(FLOOD):
        llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": f"/{n}"})), match=f"[park {n}]")
    llm.reply(openai_reply("warm"), match="[warm]")
    llm.reply(openai_reply(None, ("c1", "f__no_such_tool", {"text": "x" * BIG})), match="[big]")
    llm.reply(openai_reply("still here"), match="[big]")
    async with group("hostile_parked", CATEGORY), Client(server, elicitation_callback=nobody) as client:

        async def call(task: str) -> Any:
            with anyio.fail_after(WAIT):
                return await client.session.call_tool("agent", {"task": task}, allow_input_required=True)

        assert (await call("[warm]")).content[0].text == "warm"  # the model's connection is open from here on
        me = psutil.Process()
        before = me.num_fds()
        async with injecting(CATEGORY, FLOOD + 1) as faults:
            outcomes = [await call(f"[park {n}]") for n in range(FLOOD)]
            parked = [o for o in outcomes if isinstance(o, t.InputRequiredResult)]
            refused = [o for o in outcomes if isinstance(o, t.CallToolResult) and o.is_error]
            assert len(parked) == CAP and len(refused) == FLOOD - CAP
            assert {o.content[0].text for o in refused} == {REFUSAL}
            assert me.num_fds() <= before + 1, "a parked run holds a file descriptor"
            assert cancelled_runs(tmp_path) == FLOOD - CAP
            faults.handled(FLOOD)
            done = await call("[big]")
            assert isinstance(done, t.CallToolResult) and done.content[0].text == "still here"
            assert_no_value_over_the_bound(tmp_path / f"{done.structured_content['run_id']}.jsonl")
            faults.handled()


def cancelled_runs(directory: Path) -> int:
    """How many traces in `directory` end with a cancelled run."""
    ends = [json.loads(path.read_text().splitlines()[-1]) for path in directory.glob("*.jsonl")]
    return sum(end["kind"] == "run_finished" and end["result"]["stop_reason"] == "cancelled" for end in ends)


def assert_no_value_over_the_bound(path: Path) -> None:
    marker = f" [cut: {BIG:,} characters in all]"
    cut = 0
    for line in path.read_text().splitlines():
        for text in strings_in(json.loads(line)):
            assert len(text.encode()) <= MAX_VALUE_BYTES
            cut += text.endswith(marker)
    assert cut >= 2, "the argument is not in the trace, cut"  # as the model sent it, and as it was asked again


def strings_in(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [*value, *(s for item in value.values() for s in strings_in(item))]
    if isinstance(value, list):
        return [s for item in value for s in strings_in(item)]
    return []
