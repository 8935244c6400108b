"""OpenTelemetry metrics by the GenAI and MCP semantic conventions, through the OpenTelemetry API.

- `Metrics`, an event sink like `records.telemetry.Spans`: `gen_ai.client.operation.duration` and
  `gen_ai.client.token.usage` per model call (each model of a fallback chain its own call), and the counters
  `meta_agent.runs` (by stop reason) and `meta_agent.tool_calls` (by outcome).
- `child_call`: `mcp.client.operation.duration` of a call to a child's tool.
- `record_server_operation`: `mcp.server.operation.duration` of a request the front answers.

The API's instruments are no-ops until an SDK is set up (records/otel_setup.py), and `opentelemetry.metrics` itself
is imported at the first measurement, not with this module: the cold start does not pay for it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar

from meta_agent.core import events as ev

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter, Histogram

METER = "meta-agent"
OTHER = "_OTHER"  # the conventions' error.type when there is no better low-cardinality name
# The bucket boundaries the GenAI conventions advise (durations in seconds, token counts).
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TOKEN_BUCKETS = tuple(4.0**power for power in range(14))  # 1, 4, 16, ... 67,108,864
# The shape of an MCP method name: anything else is counted as OTHER, never as itself (and a method the server does
# not serve is OTHER too: front/server_metrics.py).
METHOD_NAME = re.compile(r"[a-z][a-zA-Z_/]{0,63}")
LABEL_LIMIT = 64  # a label taken from an error is cut: an attribute's values are few and short

T = TypeVar("T")


@dataclass(frozen=True)
class _Instruments:
    operation_duration: Histogram
    token_usage: Histogram
    runs: Counter
    tool_calls: Counter
    server_duration: Histogram
    client_duration: Histogram


@cache
def instruments() -> _Instruments:
    """The instruments, made at the first measurement from the global meter provider (a proxy until set up)."""
    from opentelemetry import metrics

    meter = metrics.get_meter(METER)

    def seconds(name: str, description: str) -> Histogram:
        return meter.create_histogram(
            name, unit="s", description=description, explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS)
        )

    return _Instruments(
        operation_duration=seconds("gen_ai.client.operation.duration", "GenAI operation duration"),
        token_usage=meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used",
            explicit_bucket_boundaries_advisory=list(TOKEN_BUCKETS),
        ),
        runs=meter.create_counter("meta_agent.runs", unit="{run}", description="Runs ended, by stop reason"),
        tool_calls=meter.create_counter(
            "meta_agent.tool_calls", unit="{call}", description="Tool calls ended, by outcome"
        ),
        server_duration=seconds("mcp.server.operation.duration", "MCP request duration as the server sees it"),
        client_duration=seconds("mcp.client.operation.duration", "MCP request duration as the client sees it"),
    )


def label(text: str) -> str:
    """`text` as an attribute value of a metric: one short line of valid UTF-8 (half a character is `?`: OTLP
    cannot encode it)."""
    line = " ".join(text[: LABEL_LIMIT * 4].split())[:LABEL_LIMIT]
    return line.encode("utf-8", "replace").decode("utf-8") or OTHER


def model_attributes(model: str) -> dict[str, str]:
    """The GenAI attributes of a model call by `model`, which is `provider:model`."""
    provider, _, name = model.partition(":")
    return {"gen_ai.operation.name": "chat", "gen_ai.provider.name": provider, "gen_ai.request.model": name or model}


class Metrics:
    """One run's metrics, from its events. A model call is timed from its request to its response, or to the
    failure that hands the turn to the next model of the chain, or to the limit or end that cuts it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._model = ""  # the model the run calls now: the chain's next after each switch
        self._mode = ""
        self._tools: frozenset[str] = frozenset()  # the run's tools: a name the model made up is OTHER
        self._call_started: float | None = None  # a model call in flight since then

    async def __call__(self, event: ev.Event) -> None:
        match event:
            case ev.RunStarted(model=model, mode=mode, tools=tools):
                self._model, self._mode, self._tools = model, mode, frozenset(tools)
            case ev.ModelRequested():
                self._call_started = self._clock()
            case ev.ModelSwitched(failed=failed, brief=brief, next=following, error_type=error_type):
                self._end_call(failed, error=label(error_type or brief))
                self._model = following
                self._call_started = self._clock()
            case ev.ModelResponded(input_tokens=tokens_in, output_tokens=tokens_out, response=response):
                attributes = model_attributes(self._model)
                answered = response.model if response is not None else ""  # the dated version of an alias
                self._end_call(self._model, error=None, answered=answered)
                usage = instruments().token_usage
                usage.record(tokens_in, {**attributes, "gen_ai.token.type": "input"})
                usage.record(tokens_out, {**attributes, "gen_ai.token.type": "output"})
            case ev.LimitReached(limit=limit):
                self._end_call(self._model, error=limit)
            case ev.ToolCallFinished(name=name, ok=ok):
                outcome = "ok" if ok else "error"
                tool = label(name) if name in self._tools else OTHER
                instruments().tool_calls.add(1, {"gen_ai.tool.name": tool, "meta_agent.outcome": outcome})
            case ev.RunFinished(result=result):
                self._end_run(result.stop_reason)
            case ev.RunFailed(error_type=error_type):
                self._end_run("error", label(error_type or OTHER))

    def _end_call(self, model: str, *, error: str | None, answered: str = "") -> None:
        if self._call_started is None:
            return
        attributes: dict[str, str] = model_attributes(model)
        if answered:
            attributes["gen_ai.response.model"] = label(answered)
        if error is not None:
            attributes["error.type"] = error
        instruments().operation_duration.record(max(0.0, self._clock() - self._call_started), attributes)
        self._call_started = None

    def _end_run(self, stop_reason: str, error: str | None = None) -> None:
        self._end_call(self._model, error=error or stop_reason)  # a call still in flight was cut by the run's end
        attributes = {"meta_agent.stop_reason": stop_reason, "gen_ai.agent.name": METER}
        if self._mode:
            attributes["meta_agent.mode"] = self._mode
        instruments().runs.add(1, attributes)


def error_type(exc: BaseException) -> str:
    """error.type of a failed request: the JSON-RPC error code when there is one, else the exception's class."""
    code = getattr(getattr(exc, "error", None), "code", None)
    if code is None:
        code = getattr(exc, "code", None)
    return str(code) if isinstance(code, int) else type(exc).__qualname__


def is_tool_error(result: Any) -> bool:
    """Whether `result` is a tool's error (a CallToolResult with is_error, or its wire form with isError)."""
    if isinstance(result, Mapping):
        return result.get("isError") is True
    return getattr(result, "is_error", False) is True


@contextmanager
def child_call(server: str, tool: str) -> Iterator[Callable[[T], T]]:
    """Time a call to `tool` of the child `server` (mcp.client.operation.duration). The body passes the result
    through what this yields, which notes a tool error; an exception leaving the body is the call's error.type."""
    started = time.monotonic()
    attributes = {"mcp.method.name": "tools/call", "gen_ai.tool.name": label(tool), "meta_agent.server": label(server)}
    outcome: dict[str, str] = {}

    def result_of(result: T) -> T:
        if is_tool_error(result):
            outcome["error.type"] = "tool_error"
        return result

    try:
        yield result_of
    except BaseException as exc:
        outcome["error.type"] = error_type(exc)
        raise
    finally:
        instruments().client_duration.record(time.monotonic() - started, {**attributes, **outcome})


def record_server_operation(method: str, seconds: float, error: str | None) -> None:
    """One request the front answered (mcp.server.operation.duration): its method, and error.type if it failed."""
    attributes = {"mcp.method.name": method if METHOD_NAME.fullmatch(method) else OTHER}
    if error is not None:
        attributes["error.type"] = error
    instruments().server_duration.record(seconds, attributes)
