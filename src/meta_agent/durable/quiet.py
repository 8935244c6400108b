"""What an idle replica spends on DBOS: its loops slowed where meta-agent needs nothing they do (docs/replicas.md,
"An idle replica").

DBOS wakes several threads of its own every second, most for a transaction or two, whether or not a run is under way.
A public setting reaches two of them (its notifications, which meta-agent does not use, are off: durable/runs.py);
these are the others, set through DBOS's private names around its launch:

- its background jobs (moving delayed workflows to their queue, cancelling workflows past their timeout): meta-agent
  starts no delayed workflow and sets no workflow timeout, so once a minute is plenty;
- its internal queue, through which a run handed on (`DBOS.resume_workflow`) reaches a replica: polled every
  `queue_poll` seconds (a third of the lease, 5 s at most) instead of every second; a run handed on waits that long
  at most, beside the lease it waited already;
- its look for new database-backed queues, every second: meta-agent declares none, so it finds none without asking.

tests/durable/test_quiet.py fails when a release of DBOS renames any of them, so an upgrade cannot bring the polling
back unnoticed (pyproject pins DBOS's major version).
"""

from __future__ import annotations

from typing import Any

BACKGROUND_JOBS_EVERY = 60.0  # seconds; DBOS's default is 1
LONGEST_QUEUE_POLL = 5.0  # seconds; DBOS's default is 1


def queue_poll(check_every: float) -> float:
    """How often a replica polls DBOS's internal queue, given how often it looks for runs to hand on."""
    return min(check_every, LONGEST_QUEUE_POLL)


def before_launch(dbos: Any, check_every: float) -> None:
    """Slow the background jobs and the internal queue's poll of `dbos` (constructed, not launched)."""
    from dbos import _workflow_commands

    _workflow_commands._BACKGROUND_JOBS_INTERVAL_SEC = BACKGROUND_JOBS_EVERY  # read once its thread starts
    dbos._registry.get_internal_queue()._polling_interval_sec = queue_poll(check_every)  # read at every poll


def on_this_loop(dbos: Any) -> None:
    """Have `dbos` (constructed, not launched) run the workflows it starts itself on the running event loop, though
    it is launched from a worker thread: DBOS takes the loop of the thread that calls its launch, where there is one,
    and keeps one it was given where there is not."""
    dbos._background_event_loop.set_main_loop()


def after_launch(dbos: Any) -> None:
    """Answer DBOS's look for database-backed queues without a transaction: meta-agent declares none."""

    def no_queues(**_filters: Any) -> list[Any]:
        return []

    dbos._sys_db.list_queues = no_queues
