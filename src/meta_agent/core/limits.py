"""A run's limits, one value object that checks itself before every model call; and the clock a run's durations are
measured on."""

from __future__ import annotations

import time
from dataclasses import dataclass

from meta_agent.errors import LimitExceeded
from meta_agent.shared.text import plural

# The defaults the README gives (Settings, MCP tools), stated once: the settings (config/settings.py) and the loop
# both take them from here.
DEFAULT_MAX_STEPS = 10
DEFAULT_PLAN_STEPS = 4
# More calls than this in one model turn is a model gone astray; the extra calls are refused, not run.
DEFAULT_MAX_TOOL_CALLS_PER_STEP = 16
# The tool calls of a whole run, those a program of code mode makes included: above the most a run of direct calls can
# make by default (10 steps of 16), and a bound on a program that calls tools in a loop.
DEFAULT_MAX_TOOL_CALLS = 200
DEFAULT_TOKEN_BUDGET = 200_000
# The cap on one answer where the wire format needs one (Anthropic Messages, MCP sampling): enough for an answer or a
# round of tool calls.
DEFAULT_MAX_OUTPUT_TOKENS = 8192


@dataclass(frozen=True, kw_only=True)
class Limits:
    max_steps: int = DEFAULT_MAX_STEPS
    max_tool_calls_per_step: int = DEFAULT_MAX_TOOL_CALLS_PER_STEP
    max_tool_calls: int = DEFAULT_MAX_TOOL_CALLS  # in the whole run, a program's calls included
    token_budget: int = DEFAULT_TOKEN_BUDGET
    time_limit: float | None = None  # seconds of wall clock for the run

    def check(self, *, steps_done: int, tokens_used: int, elapsed: float) -> None:
        """Call before each model call.

        Raises:
            LimitExceeded: naming the limit (`max_steps`, `token_budget` or `deadline`) in `reason`.
        """
        if steps_done >= self.max_steps:
            raise LimitExceeded("max_steps", f"the step limit ({plural(self.max_steps, 'step')}) was reached")
        if tokens_used >= self.token_budget:
            raise LimitExceeded(
                "token_budget", f"the token budget ({self.token_budget} tokens) was used up ({tokens_used} tokens)"
            )
        if self.time_limit is not None and elapsed >= self.time_limit:
            raise LimitExceeded("deadline", f"the time limit ({self.time_limit:g} s) passed")


def clock() -> float:
    """A reading of the clock durations are measured on, for `ms_since`: the performance counter. The event loop's
    clock, which deadlines use, moves in steps of about 16 ms on Windows before Python 3.13, longer than many tool
    calls take."""
    return time.perf_counter()


def ms_since(started: float) -> int:
    """Whole milliseconds since `started`, a `clock()` reading."""
    return round((time.perf_counter() - started) * 1000)
