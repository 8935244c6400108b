"""The metrics sink and the SDK's set-up from OTEL_* variables: what each records, and that nothing of the SDK is
imported or set up without configuration."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import without_otel
from opentelemetry import metrics
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader

from meta_agent.core import events as ev
from meta_agent.records import otel_setup
from meta_agent.records.metrics import Metrics, record_server_operation

pytestmark = [pytest.mark.quick, pytest.mark.anyio]

DELTA = AggregationTemporality.DELTA


@pytest.fixture(scope="module")
def reader() -> InMemoryMetricReader:
    """The process's meter provider, set once: each read returns what was recorded since the last."""
    memory = InMemoryMetricReader(preferred_temporality={Histogram: DELTA, Counter: DELTA})
    metrics.set_meter_provider(MeterProvider(metric_readers=[memory]))
    return memory


@pytest.fixture
def recorded(reader: InMemoryMetricReader) -> Iterator[dict[str, list[Any]]]:
    """A test's metrics: name -> data points, read when asked (`recorded` is filled in place)."""
    reader.get_metrics_data()  # what earlier tests recorded
    found: dict[str, list[Any]] = {}

    def read() -> None:
        data = reader.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found.setdefault(metric.name, []).extend(metric.data.data_points)

    found["__read__"] = [read]
    yield found


def read(recorded: dict[str, list[Any]]) -> dict[str, list[Any]]:
    recorded["__read__"][0]()
    return recorded


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def result(stop_reason: str) -> Any:
    """What the sink reads of a run's result."""
    return SimpleNamespace(stop_reason=stop_reason)


async def test_a_fallback_chain_measures_each_model_and_counts_the_run(recorded: dict[str, list[Any]]) -> None:
    clock = Clock()
    sink = Metrics(clock)
    await sink(ev.RunStarted(run_id="r1", mode="agent", task="t", model="openai:first", tools=("time.now",)))
    await sink(ev.ModelTurnStarted(step=1))
    await sink(ev.ModelRequested(step=1, request=None))  # type: ignore[arg-type]
    clock.now += 2.0
    await sink(ev.ModelSwitched(step=1, failed="openai:first", error="x", brief="HTTP 503", next="anthropic:second"))
    clock.now += 0.5
    await sink(ev.ModelResponded(step=1, text="hi", tool_calls=(), input_tokens=30, output_tokens=4, duration_ms=2500))
    await sink(ev.ToolCallFinished(step=1, call_id="c1", name="time.now", ok=False, duration_ms=3, error="boom"))
    await sink(ev.RunFinished(result=result("final")))
    found = read(recorded)

    durations = {point.attributes["gen_ai.request.model"]: point for point in found["gen_ai.client.operation.duration"]}
    failed, answered = durations["first"], durations["second"]
    assert failed.attributes["gen_ai.provider.name"] == "openai" and failed.attributes["error.type"] == "HTTP 503"
    assert (failed.sum, failed.count) == (2.0, 1)
    assert answered.attributes["gen_ai.provider.name"] == "anthropic" and "error.type" not in answered.attributes
    assert (answered.sum, answered.count) == (0.5, 1)
    tokens = {point.attributes["gen_ai.token.type"]: point.sum for point in found["gen_ai.client.token.usage"]}
    assert tokens == {"input": 30, "output": 4}
    [tool] = found["meta_agent.tool_calls"]
    assert tool.attributes == {"gen_ai.tool.name": "time.now", "meta_agent.outcome": "error"} and tool.value == 1
    [run] = found["meta_agent.runs"]
    assert run.attributes["meta_agent.stop_reason"] == "final" and run.value == 1


async def test_a_call_the_deadline_cuts_is_an_error(recorded: dict[str, list[Any]]) -> None:
    clock = Clock()
    sink = Metrics(clock)
    await sink(ev.RunStarted(run_id="r1", mode="agent", task="t", model="ollama:qwen3", tools=()))
    await sink(ev.ModelRequested(step=1, request=None))  # type: ignore[arg-type]
    clock.now += 1.0
    await sink(ev.LimitReached(step=1, limit="deadline"))
    await sink(ev.RunFinished(result=result("deadline")))
    found = read(recorded)
    [call] = found["gen_ai.client.operation.duration"]
    assert call.attributes["error.type"] == "deadline" and call.count == 1  # not counted again at the run's end
    assert "gen_ai.client.token.usage" not in found


def test_server_operations_name_known_methods_only(recorded: dict[str, list[Any]]) -> None:
    record_server_operation("tools/call", 0.25, None)
    record_server_operation("x" * 500 + "\n", 0.25, "-32601")
    found = read(recorded)
    methods = {point.attributes["mcp.method.name"]: point for point in found["mcp.server.operation.duration"]}
    assert set(methods) == {"tools/call", "_OTHER"}
    assert methods["_OTHER"].attributes["error.type"] == "-32601"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, {"traces": "http/protobuf", "metrics": "http/protobuf"}),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, None),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_METRICS_EXPORTER": "none"},
            {"traces": "http/protobuf"},
        ),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, {"traces": "http/protobuf"}),
        ({"OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, {"metrics": "grpc"}),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, None),
        ({"OTEL_TRACES_EXPORTER": "console"}, None),
    ],
)
def test_what_the_variables_configure(env: dict[str, str], expected: dict[str, str] | None) -> None:
    wanted = otel_setup.plan(env)
    assert (wanted.protocols if wanted else None) == expected


def test_the_service_name() -> None:
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}
    assert otel_setup.plan(endpoint).service == "meta-agent"  # type: ignore[union-attr]
    assert otel_setup.plan({**endpoint, "OTEL_SERVICE_NAME": "mine"}).service == "mine"  # type: ignore[union-attr]


def test_without_the_exporters_a_configured_endpoint_is_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The otel extra not installed (its exporter cannot be imported): start says so and sets nothing up."""
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    warnings: list[dict[str, Any]] = []
    monkeypatch.setattr(
        otel_setup, "log", type("L", (), {"warning": lambda _, event, **kw: warnings.append({event: kw})})()
    )
    assert otel_setup.start({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}) is None
    assert len(warnings) == 1 and "otel_not_installed" in warnings[0]


@pytest.mark.processes
@pytest.mark.parametrize("module", ["meta_agent.cli.main", "meta_agent.cli.serving", "meta_agent.front.server"])
def test_nothing_of_the_sdk_is_imported_without_configuration(module: str) -> None:
    """The commands' import paths (serve's and run's) and set-up without OTEL_* variables import no SDK, no
    exporter, and not even the metrics API (imported at the first measurement)."""
    code = (
        f"import os, sys, {module}, meta_agent.cli.commands\n"
        "from meta_agent.records.otel_setup import start\n"
        "assert start({k: v for k, v in os.environ.items() if not k.startswith('OTEL_')}) is None\n"
        "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk', 'opentelemetry.exporter', "
        "'opentelemetry.metrics'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


async def test_made_up_methods_are_one_series(recorded: dict[str, list[Any]]) -> None:
    """A hostile host's thousands of made-up method names, each matching the pattern of a method name, are not
    thousands of series of mcp.server.operation.duration: what the server does not serve is _OTHER."""
    from mcp.shared.exceptions import MCPError

    from meta_agent.front.server_metrics import time_each_request

    async def not_found(ctx: Any) -> Any:
        raise MCPError(code=-32601, message="Method not found", data=ctx.method)

    async def dropped(ctx: Any) -> Any:
        return None  # an unhandled notification

    async def answered(ctx: Any) -> Any:
        return {}

    for index in range(50):
        name = "".join(chr(ord("a") + int(digit)) for digit in str(index))  # a name of letters, as the pattern has
        with pytest.raises(MCPError):
            await time_each_request(SimpleNamespace(method=f"made/{name}", request_id=index), not_found)  # type: ignore[arg-type]
        await time_each_request(SimpleNamespace(method=f"notifications/{name}", request_id=None), dropped)  # type: ignore[arg-type]
    await time_each_request(SimpleNamespace(method="tasks/get", request_id=1), answered)  # type: ignore[arg-type]
    await time_each_request(SimpleNamespace(method="notifications/initialized", request_id=None), dropped)  # type: ignore[arg-type]
    found = read(recorded)
    methods = {point.attributes["mcp.method.name"] for point in found["mcp.server.operation.duration"]}
    assert methods == {"_OTHER", "tasks/get", "notifications/initialized"}, methods


async def test_a_tool_the_run_does_not_have_is_one_series(recorded: dict[str, list[Any]]) -> None:
    """A model calling a tool of a made-up name on every call (a hostile endpoint) makes no series per name."""
    sink = Metrics(Clock())
    await sink(ev.RunStarted(run_id="r1", mode="agent", task="t", model="openai:m", tools=("k.t",)))
    for index in range(20):
        await sink(ev.ToolCallFinished(step=1, call_id=f"c{index}", name=f"made-up-{index}", ok=False, duration_ms=1))
    await sink(ev.ToolCallFinished(step=1, call_id="c", name="k.t", ok=True, duration_ms=1))
    found = read(recorded)
    names = {point.attributes["gen_ai.tool.name"]: point.value for point in found["meta_agent.tool_calls"]}
    assert names == {"_OTHER": 20, "k.t": 1}


def test_a_child_call_bounds_its_names(recorded: dict[str, list[Any]]) -> None:
    """A child's tool of a name of a megabyte is not a metric attribute of a megabyte."""
    from meta_agent.records.metrics import child_call

    with child_call("s" * 1_000_000, "t" * 1_000_000) as note:
        note({})
    found = read(recorded)
    [point] = found["mcp.client.operation.duration"]
    assert all(len(str(value)) <= 64 for value in point.attributes.values())


@pytest.mark.processes
@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "nan"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "inf"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "-1"),
        ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "5s"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "0"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "2.5"),  # milliseconds are whole, as the specification has them
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "1_000"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "\uff11\uff10"),  # digits of another script
        ("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "3600001"),  # over an hour: a mistake of unit
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "99999999999999999999999"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "not a url"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://u:s3cr3t@collector:4318/?key=s3cr3t"),  # named without its key
        ("OTEL_BSP_SCHEDULE_DELAY", "soon"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "-5"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "10"),  # fewer than a batch (512): the SDK refuses it
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "0"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "0"),
        ("OTEL_METRIC_EXPORT_TIMEOUT", "x"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "xml"),
    ],
)
def test_a_bad_setting_is_one_line_naming_it(variable: str, value: str) -> None:
    """An operator's nonsense OTEL_* setting: no traceback, no silent fallback, but one line naming the variable,
    and no telemetry set up from it."""
    code = (
        "import os\nfrom meta_agent.records.otel_setup import start\nprint('started:', start(os.environ) is not None)\n"
    )
    env = {
        **without_otel(),
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
        variable: value,
    }
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True, env=env)
    said = done.stdout + done.stderr
    assert "Traceback" not in said
    assert "started: False" in said
    assert [line for line in said.splitlines() if variable in line]
    assert "s3cr3t" not in said


def test_a_label_is_valid_utf8() -> None:
    """Half a character (a model endpoint's JSON may escape one) is no attribute OTLP cannot encode, each export
    after logging a traceback for it."""
    from meta_agent.records.metrics import label

    assert label("model-\ud800").encode("utf-8") == b"model-?"
