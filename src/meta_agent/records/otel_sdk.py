"""The OpenTelemetry SDK and its OTLP exporters, set up as global providers (records/otel_setup.py).

Imported only when an exporter is configured: importing this module is importing the SDK (the `otel` extra), and
an ImportError here means the extra is not installed.

Each export, of a batch of spans or of the metrics, runs on a thread of the SDK's (BatchSpanProcessor's,
PeriodicExportingMetricReader's), never on the thread that ended the span or recorded the measurement, and is over
within its timeout whatever the collector does: over gRPC the timeout is the call's deadline, over HTTP the session
of records/otlp_http.py makes it one. While a collector is down, spans wait in the processor's queue, which holds
at most OTEL_BSP_MAX_QUEUE_SIZE of them (2,048 by default) and drops the oldest beyond; metrics are a sum per
series, whatever the number of exports that fail.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from meta_agent.records.otlp_http import BoundedSession


def install(protocols: dict[str, str], timeouts: dict[str, float], resource: dict[str, Any]) -> list[Any]:
    """Set the global tracer provider and meter provider for the signals of `protocols` (signal: protocol), with
    OTLP exporters bounded by `timeouts` (signal: seconds); returns the providers, to shut down at the end. They
    register no `atexit` handler: the caller shuts them down within a bound of its own."""
    described = Resource.create(resource)
    tracer_provider: TracerProvider | None = None
    try:  # both made before either is set: settings the SDK refuses (a ValueError) leave nothing set up, or running
        if "traces" in protocols:
            tracer_provider = TracerProvider(resource=described, shutdown_on_exit=False)
            tracer_provider.add_span_processor(span_processor(protocols["traces"], timeouts["traces"]))
        meter_provider = None
        if "metrics" in protocols:
            reader = metric_reader(protocols["metrics"], timeouts["metrics"])
            meter_provider = MeterProvider(resource=described, metric_readers=[reader], shutdown_on_exit=False)
    except ValueError:
        if tracer_provider is not None:
            tracer_provider.shutdown()
        raise
    providers: list[Any] = []
    if tracer_provider is not None:
        trace.set_tracer_provider(tracer_provider)
        providers.append(tracer_provider)
    if meter_provider is not None:
        metrics.set_meter_provider(meter_provider)
        providers.append(meter_provider)
    return providers


def span_processor(protocol: str, timeout: float) -> BatchSpanProcessor:
    """The spans' batches, each exported over `protocol` within `timeout` seconds; the queue's size, the batches'
    and their schedule from the SDK's OTEL_BSP_* variables.

    Raises:
        ValueError: those variables together make no sense (a queue smaller than a batch)."""
    return BatchSpanProcessor(_span_exporter(protocol, timeout), export_timeout_millis=timeout * 1000)


def metric_reader(protocol: str, timeout: float) -> PeriodicExportingMetricReader:
    """The metrics, exported over `protocol` every OTEL_METRIC_EXPORT_INTERVAL, each time within `timeout`
    seconds."""
    return PeriodicExportingMetricReader(_metric_exporter(protocol, timeout), export_timeout_millis=timeout * 1000)


def _span_exporter(protocol: str, timeout: float) -> SpanExporter:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans

        return GrpcSpans(timeout=timeout)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans

    return HttpSpans(timeout=timeout, session=BoundedSession())


def _metric_exporter(protocol: str, timeout: float) -> MetricExporter:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetrics

        return GrpcMetrics(timeout=timeout)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetrics

    return HttpMetrics(timeout=timeout, session=BoundedSession())
