"""The sandbox a program of code mode runs in: pydantic-monty, a Python subset in Rust that runs each program in a
worker process of its own, with no filesystem, network, environment or subprocess, and imports of a few pure modules
only (json, math, re, datetime, collections and the like).

The program runs in the worker while this process waits on it without holding the event loop: a spinning program costs
one worker process its CPU, never a caller of the server. Each `call_tool` pauses the program (a snapshot of Monty's)
and comes back here, where it is answered by the run's own call of the tool; a refused or failed call raises in the
program, which may catch it; a limit of the run stops the program for good. Cancelling the run leaves the worker's
pool, which kills the worker: a program cannot catch its cancellation, because it is never told.

A program is deterministic given its calls' answers, which a durable run's replay needs (durable/steps.py): the clock
is refused to it (it asks a tool for the time), `random` is seeded by the program's own text, and `sleep` returns at
once.

pydantic-monty is imported on the first program, never at the server's start.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from meta_agent.shared.text import one_line

if TYPE_CHECKING:
    import pydantic_monty

# The limits of one program. Time is what the program itself runs, not the time its tool calls take.
TIME_LIMIT = 30.0  # seconds, unless META_AGENT_CODE_TIME_LIMIT says otherwise: well before the run's own limits
MEMORY_LIMIT = 100 * 1024 * 1024  # bytes of the program's heap: far above a program that totals some results
RECURSION_LIMIT = 200  # calls deep: enough for any short program, far below what would crash the worker
OUTPUT_LIMIT = 1_000_000  # characters printed: the run keeps a long output under a handle; more is a runaway loop
# Pauses a program may make (its tool calls, and its other calls to the host): the pool's own bound, above the run's
# limit of tool calls, so a program calling in a loop meets the run's limit first and is told so.
SUSPENSIONS_LIMIT = 1_000
T = TypeVar("T")
_EXIT_SECONDS = 30.0  # the most leaving a pool may take (it kills its worker): a stuck exit must not hold the run
_CHECKOUT_SECONDS = 30.0  # the most starting a program's worker may take, on a machine however busy
_GRACE = 5.0  # seconds past the time limit after which the pool kills a worker that has not stopped itself
_ERROR_CHARS = 2_000  # of an error's line
MODULES = (
    "its modules: json, math, re, datetime, collections, itertools, functools, random, decimal, bisect, base64, csv"
)


class CallRefused(Exception):
    """A tool call the program made failed or was refused: raised in the program, as an `Exception` it may catch."""


class ProgramStopped(Exception):
    """The program must stop (a limit of the run): it is not resumed, and run_code's result says why."""


CallTool = Callable[[Any, Any], Awaitable[Any]]


@dataclass(frozen=True, kw_only=True)
class ProgramEnd:
    """How a program ended: what it printed, the value of its last expression (None: none), or the one line of the
    error that ended it."""

    printed: str
    value: Any = None
    error: str | None = None


class _Printed:
    """What a program printed, up to OUTPUT_LIMIT characters; past it, the program is stopped."""

    def __init__(self) -> None:
        self.chunks: list[str] = []
        self.size = 0

    def __call__(self, _stream: str, text: str) -> None:
        self.size += len(text)
        if self.size > OUTPUT_LIMIT:
            raise ValueError(f"the program printed more than {OUTPUT_LIMIT:,} characters (the limit)")
        self.chunks.append(text)

    @property
    def text(self) -> str:
        return "".join(self.chunks)


async def run_program(code: str, call_tool: CallTool, *, time_limit: float = TIME_LIMIT) -> ProgramEnd:
    """Run `code` to its end in a fresh sandbox, each `call_tool(name, arguments)` of it answered by `call_tool`
    (which raises CallRefused for an error the program gets, ProgramStopped to stop it), within `time_limit` seconds
    of its own work."""
    import pydantic_monty as monty

    printed = _Printed()
    limits: pydantic_monty.ResourceLimits = {
        "max_feed_duration_secs": time_limit,
        "max_memory": MEMORY_LIMIT,
        "max_recursion_depth": RECURSION_LIMIT,
        "max_suspensions": SUSPENSIONS_LIMIT,
    }
    policy: pydantic_monty.OSPolicy = {"datetime": "call_host", "sleep": "zero", "random_start": {"seed": code}}
    try:
        # no worker kept warm: a pool left while its worker is killed would start another, and leave it behind
        pool = monty.AsyncMonty(
            min_processes=0, max_processes=1, request_timeout=time_limit + _GRACE, checkout_timeout=_CHECKOUT_SECONDS
        )
        async with _left_whole(pool), _left_whole(pool.checkout(limits=limits, os_policy=policy)) as session:
            snapshot = await session.feed_start(code, print_callback=printed)
            while not isinstance(snapshot, monty.MontyComplete):
                snapshot = await _answered(snapshot, call_tool)
            return ProgramEnd(printed=printed.text, value=snapshot.output)
    except ProgramStopped as stop:
        return ProgramEnd(printed=printed.text, error=str(stop))
    except monty.MontyError as exc:
        return ProgramEnd(printed=printed.text, error=_error_line(exc, time_limit))


@asynccontextmanager
async def _left_whole(context: AbstractAsyncContextManager[T]) -> AsyncIterator[T]:
    """`context`, entered and left shielded from a cancellation of the run: leaving the pool is what kills its worker
    and reaps it, and an entry or exit cut short would leave the process behind (spinning on, or a zombie). The
    cancellation then lands at the program's first pause or feed, inside."""
    with anyio.CancelScope(shield=True):  # bounded by the pool's checkout timeout
        entered = await context.__aenter__()
    try:
        yield entered
    except BaseException as exc:
        with anyio.CancelScope(shield=True), anyio.move_on_after(_EXIT_SECONDS):
            await context.__aexit__(type(exc), exc, exc.__traceback__)
        raise
    with anyio.CancelScope(shield=True), anyio.move_on_after(_EXIT_SECONDS):
        await context.__aexit__(None, None, None)


async def _answered(snapshot: Any, call_tool: CallTool) -> Any:
    """The program resumed with the answer to what it paused for: a tool call's result, or an error."""
    import pydantic_monty as monty

    if isinstance(snapshot, monty.AsyncNameLookupSnapshot):  # a name the program never defined
        return await snapshot.resume()
    if not isinstance(snapshot, monty.AsyncFunctionSnapshot):  # awaiting several calls at once (asyncio.gather)
        raise ProgramStopped("run_code: the program awaited calls together; call tools one after another")
    if snapshot.is_os_function and snapshot.function_name == "import" and snapshot.args:
        missing = ModuleNotFoundError(f"no module named {snapshot.args[0]!r} in the sandbox; {MODULES}")
        return await snapshot.resume({"exception": missing})
    if snapshot.is_os_function:
        what = "the clock" if str(snapshot.function_name).startswith(("datetime", "date", "time")) else "the system"
        refusal = f"{snapshot.function_name}: a program has no access to {what}; ask a tool"
        return await snapshot.resume({"exception": PermissionError(refusal)})
    if snapshot.function_name != "call_tool":
        return await snapshot.resume({"exception": NameError(f"name {snapshot.function_name!r} is not defined")})
    args, kwargs = snapshot.args, snapshot.kwargs
    try:
        name = args[0] if args else kwargs.get("name")
        arguments = args[1] if len(args) > 1 else kwargs.get("arguments", {})
        value = await call_tool(name, arguments)
    except CallRefused as refused:
        return await snapshot.resume({"exception": Exception(str(refused))})
    return await snapshot.resume({"return_value": value})


def _error_line(exc: pydantic_monty.MontyError, time_limit: float) -> str:
    """The one line run_code's error says: where the program failed and why, a limit in its own words."""
    import pydantic_monty as monty

    if isinstance(exc, monty.MontyCrashedError):
        why = f"ran longer than {time_limit:g} s" if exc.timed_out else "stopped its sandbox"
        return f"run_code: the program {why}"
    if isinstance(exc, (monty.MontyRuntimeError, monty.MontySyntaxError)):
        said = exc.display("type-msg")
        frames = exc.traceback()
        where = f"line {frames[-1].line}: " if frames else ""
        return f"run_code: {where}{one_line(_limit_named(said, time_limit), _ERROR_CHARS)}"
    return f"run_code: {one_line(str(exc), _ERROR_CHARS)}"


def _limit_named(said: str, time_limit: float) -> str:
    """A limit of Monty's, said as the limit of a program it is."""
    if said.startswith("TimeoutError: feed time limit"):
        return f"the program ran longer than {time_limit:g} s (META_AGENT_CODE_TIME_LIMIT)"
    if said.startswith("MemoryError: memory limit"):
        return f"the program used more than {MEMORY_LIMIT // 2**20} MB of memory (the limit of a program)"
    if said.startswith("RuntimeError: suspension limit"):
        return f"the program paused more than {SUSPENSIONS_LIMIT:,} times for the host (the limit of a program)"
    return said


def value_text(value: Any) -> str:
    """A program's last value as run_code's result says it: a string as it is, data as JSON, anything else its
    repr."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)
