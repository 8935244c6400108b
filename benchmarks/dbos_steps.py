"""What DBOS itself costs, apart from meta-agent: the CPU of a process that runs DBOS workflows of no-op async steps
one after another against a PostgreSQL database, per workflow, for a workflow without steps and one with `STEPS`.
Run as a process of its own (DBOS is one per process): `python dbos_steps.py DATABASE_URL`, which prints JSON.

It is the floor under a durable run's cost (replicas.py): a run of the concurrency burst is a workflow with as many
steps as its model turns, tool calls and conversation save, and whatever meta-agent adds is on top of this.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from typing import Any

STEPS = 6
WARM = 5  # workflows before the clock: connections open, statements prepared
RUNS = 100


def _cpu() -> float:
    times = os.times()
    return times.user + times.system


async def _measure(workflow: Any, set_id: Any, steps: int) -> float:
    """CPU milliseconds per workflow of `steps` no-op steps."""
    for _ in range(WARM):
        with set_id(str(uuid.uuid4())):
            await workflow(steps)
    started = _cpu()
    for _ in range(RUNS):
        with set_id(str(uuid.uuid4())):
            await workflow(steps)
    return (_cpu() - started) * 1000 / RUNS


def main(url: str) -> dict[str, float]:
    from dbos import DBOS, SetWorkflowID

    DBOS(config={"name": "dbos-steps", "system_database_url": url, "log_level": "WARNING"})

    async def nothing(i: int) -> int:
        return i

    @DBOS.workflow(name="steps")
    async def workflow(steps: int) -> int:
        for i in range(steps):
            await DBOS.run_step_async({"name": "step"}, nothing, i)
        return steps

    async def both() -> tuple[float, float]:
        return await _measure(workflow, SetWorkflowID, 0), await _measure(workflow, SetWorkflowID, STEPS)

    DBOS.launch()
    try:
        bare, stepped = asyncio.run(both())
    finally:
        DBOS.destroy()
    return {"workflow ms": bare, "step ms": (stepped - bare) / STEPS}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
