"""The fault suite's hostile children group (category hostile_input; tests/faults/test_faults.py describes the suite,
the harness is tests/fixtures/fault_harness.py).

hostile_children: a real child process that, before it serves, writes thousands of different lines to its stderr and
to its stdout and then a line of 64 MiB without end; and that answers a call with a message over the line limit.
Checked through the real log handler: the child gets ready, the lines logged for it stay within its budget and count
every line it wrote, our memory does not grow with the flood, and the call fails at once in one line while the child
serves on.
"""

from __future__ import annotations

import io
import json
import math
import sys
import time
from typing import Any

import anyio
import psutil
import pytest
from captured_logs import logged_to
from conftest import TESTS
from fault_harness import WAIT, group, injecting, log_to_a_list  # noqa: F401  (this module's fixtures)
from fault_tally import TALLY

from meta_agent.children.pool import ChildPool
from meta_agent.config.servers import ServerEntry
from meta_agent.errors import ChildProtocolError
from meta_agent.records.log_repeats import SOURCE_BUDGET

pytestmark = pytest.mark.anyio

GROUPS = {"hostile_children"}
TALLY.expected_groups |= GROUPS
FLOODING_CHILD = TESTS / "fixtures" / "flooding_child.py"
LINES = 5000
HUGE_MB = 64
# What our memory may grow by while the child floods: the line limit and the parser's copies, far below the flood.
MEMORY_BOUND = 60 * 2**20
# A call whose answer was dropped must fail well before the child's timeout (60 s).
FAST = 15.0


def logged(stream: io.StringIO, event: str) -> tuple[int, int]:
    """Lines of `event` written for the child, and how many they stand for with those held back."""
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    mine = [line for line in lines if line["event"] == event and line.get("server") == "h"]
    return len(mine), sum(1 + line.get("repeated", 0) for line in mine)


async def test_hostile_children() -> None:
    args = [str(FLOODING_CHILD), "--stderr", str(LINES), "--stdout", str(LINES), "--huge", str(HUGE_MB)]
    entry = ServerEntry(command=sys.executable, args=args)
    stream = io.StringIO()
    me = psutil.Process()
    peak = [me.memory_info().rss]

    async def sample() -> None:
        while True:
            peak[0] = max(peak[0], me.memory_info().rss)
            await anyio.sleep(0.005)

    async with group("hostile_children", "hostile_input"), injecting("hostile_input", 4) as faults:
        started, before = time.monotonic(), peak[0]
        with logged_to(stream):
            async with ChildPool({"h": entry}, restart=False) as pool:
                async with anyio.create_task_group() as sampling:
                    sampling.start_soon(sample)
                    with anyio.fail_after(WAIT):
                        await pool.wait_settled()
                    sampling.cancel_scope.cancel()
                child = pool["h"]
                assert child.status.state == "ready", child.status.error
                assert peak[0] - before < MEMORY_BOUND, f"grew by {(peak[0] - before) / 2**20:.0f} MiB"
                faults.handled()
                with anyio.fail_after(FAST), pytest.raises(ChildProtocolError) as failed:
                    await child.call("huge_answer", {"mb": 20, "id_last": True})
                assert "huge_answer failed: the child's answer was over 16 MiB" in str(failed.value)
                assert "\n" not in str(failed.value)
                result: Any = await child.call("echo", {"text": "still serving"})
                assert result.content[0].text == "still serving" and child.status.restarts == 0
                faults.handled()
        windows = math.ceil(time.monotonic() - started) + 1
        for event, lines in (("child_stderr", LINES), ("child_bad_output", LINES + 2)):  # + the two overlong lines
            written, counted = logged(stream, event)
            assert counted == lines and written <= (SOURCE_BUDGET + 1) * windows, (event, written, counted)
            faults.handled()
