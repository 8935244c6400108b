"""The OpenTelemetry SDK and its OTLP exporters, set up as global providers (records/otel_setup.py).

Imported only when an exporter is configured: importing this module is importing the SDK (the `otel` extra), and
an ImportError here means the extra is not installed.
"""

from __future__ import annotations

from typing import Any

import requests
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter


def install(protocols: dict[str, str], timeouts: dict[str, float], resource: dict[str, Any]) -> list[Any]:
    """Set the global tracer provider and meter provider for the signals of `protocols` (signal: protocol), with
    OTLP exporters bounded by `timeouts` (signal: seconds); returns the providers, to shut down at the end. They
    register no `atexit` handler: the caller shuts them down within a bound of its own."""
    described = Resource.create(resource)
    tracer_provider: TracerProvider | None = None
    try:  # both made before either is set: settings the SDK refuses (a ValueError) leave nothing set up, or running
        if "traces" in protocols:
            exporter = _span_exporter(protocols["traces"], timeouts["traces"])
            processor = BatchSpanProcessor(exporter, export_timeout_millis=timeouts["traces"] * 1000)
            tracer_provider = TracerProvider(resource=described, shutdown_on_exit=False)
            tracer_provider.add_span_processor(processor)
        meter_provider = None
        if "metrics" in protocols:
            reader = PeriodicExportingMetricReader(
                _metric_exporter(protocols["metrics"], timeouts["metrics"]),
                export_timeout_millis=timeouts["metrics"] * 1000,
            )
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


# The most of a collector's answer read: the exporters need its status only (and a small protobuf at most), and an
# answer of hundreds of MB, or an endless one, would otherwise be read whole into memory.
ANSWER_BYTES = 64 * 1024


class _BoundedSession(requests.Session):
    """A requests session for the OTLP/HTTP exporters that reads at most ANSWER_BYTES of an answer."""

    def request(self, *args: Any, **kwargs: Any) -> requests.Response:
        kwargs["stream"] = True
        response = super().request(*args, **kwargs)
        try:
            response._content = next(response.iter_content(ANSWER_BYTES), b"")[:ANSWER_BYTES]
        finally:
            response.close()  # the rest is never read: the connection is dropped, not pooled
        return response


def _span_exporter(protocol: str, timeout: float) -> SpanExporter:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans

        return GrpcSpans(timeout=timeout)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans

    return HttpSpans(timeout=timeout, session=_BoundedSession())


def _metric_exporter(protocol: str, timeout: float) -> MetricExporter:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetrics

        return GrpcMetrics(timeout=timeout)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetrics

    return HttpMetrics(timeout=timeout, session=_BoundedSession())
