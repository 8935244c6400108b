"""The cycle collector's settings for a process that serves (`meta-agent serve`).

A serving process imports everything before its first request: tens of thousands of objects (modules, classes, the
SDKs' pydantic schemas) that live as long as it does. Python's cycle collector goes through all of them at every
full collection, a pause of about 100 ms on this heap, several times a minute under a burst of runs, and the young
generation's default threshold (700) sets off a collection every few hundred objects a run allocates. Measured on
the concurrency benchmark's bursts (benchmarks/RESULTS.md), freezing what start-up made and the thresholds below took
6% off a run's CPU, with memory over 1,000 runs unchanged.
"""

from __future__ import annotations

import gc

import structlog

log = structlog.get_logger(__name__)

# The young generation's threshold (allocations less deallocations of tracked objects), and how many collections of
# each generation make one of the next: a run's own cycles still go at the next young collection, its short-lived
# objects mostly by reference counting before any.
THRESHOLDS = (7_000, 20, 20)


def settle_for_serving() -> None:
    """Once start-up has imported and built what serving needs: what exists now is left out of every later collection
    (`gc.freeze`: it stays as long as the process), and collections come less often."""
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    log.debug("heap_settled", frozen=gc.get_freeze_count(), thresholds=list(THRESHOLDS))
