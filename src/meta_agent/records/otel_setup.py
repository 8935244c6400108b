"""The OpenTelemetry SDK, set up from the standard `OTEL_*` variables for `meta-agent serve` and `meta-agent run`.

Nothing is set up, and nothing of the SDK imported, unless an OTLP exporter is configured: an endpoint
(`OTEL_EXPORTER_OTLP_ENDPOINT`, or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `_METRICS_ENDPOINT` for one signal), or
`OTEL_TRACES_EXPORTER` / `OTEL_METRICS_EXPORTER` set to `otlp` (`none` turns a signal off); `OTEL_SDK_DISABLED=true`
turns both off. The protocol is `OTEL_EXPORTER_OTLP_PROTOCOL` (or the signal's own): `http/protobuf`, the default,
or `grpc`. The service is `OTEL_SERVICE_NAME`, by default meta-agent. The exporters read their endpoint, headers and
compression from the same variables themselves. The export timeout is `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT` /
`_METRICS_TIMEOUT`, else `OTEL_EXPORTER_OTLP_TIMEOUT`, in milliseconds as the specification says (10,000 by
default), read here and handed to the exporters in seconds: the Python exporters would read those variables as
seconds.

Spans go out in batches (BatchSpanProcessor) and metrics periodically (PeriodicExportingMetricReader,
`OTEL_METRIC_EXPORT_INTERVAL`), each from a thread of the SDK and within the timeout (records/otel_sdk.py): a
collector that is down, slow or trickles its answers never holds a run up, and costs each batch the timeout at most.
At the end both are flushed and shut down within SHUTDOWN_SECONDS, whatever the collector does; what is still
unsent then is dropped. Without the `otel` extra installed, a configured exporter is one warning, not a failure.
"""

from __future__ import annotations

import functools
import os
import re
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, ParamSpec
from urllib.parse import urlsplit

import anyio
import structlog

from meta_agent.shared.urls import loggable_url
from meta_agent.version import __version__

log = structlog.get_logger(__name__)
SIGNALS = ("traces", "metrics")
PROTOCOLS = ("http/protobuf", "grpc")
DEFAULT_SERVICE = "meta-agent"
EXPORT_TIMEOUT_MS = 10_000  # for one batch, unless OTEL_EXPORTER_OTLP_TIMEOUT (or the signal's) says: the spec's
# An hour: a longer timeout for one batch is a mistake of unit, not a wish to wait that long.
MOST_TIMEOUT_MS = 3_600_000
SHORT_TIMEOUT_MS = 100  # below, most likely meant in seconds, as meta-agent read it before: a warning
SHUTDOWN_SECONDS = 2.0  # the most the end of a command waits for the last spans and metrics to go out
EXTRA = "pip install 'meta-agent[otel]'"
# The SDK's settings it reads from the environment itself, each a whole number above zero (milliseconds, or spans):
# a bad one made it raise, or log a traceback and go on with its default.
SDK_WHOLE_NUMBERS = (
    "OTEL_BSP_SCHEDULE_DELAY",
    "OTEL_BSP_EXPORT_TIMEOUT",
    "OTEL_BSP_MAX_QUEUE_SIZE",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
    "OTEL_METRIC_EXPORT_INTERVAL",
    "OTEL_METRIC_EXPORT_TIMEOUT",
)
_WHOLE = re.compile(r"[0-9]{1,10}")  # ASCII digits only: int() would take "1_000" and other scripts' digits
_HOST_PORT = re.compile(r"[A-Za-z0-9.\-\[\]:]+:[0-9]{1,5}")  # gRPC's endpoint may also be host:port

P = ParamSpec("P")


@dataclass(frozen=True)
class Plan:
    """What to export: `protocols` maps each configured signal to its protocol."""

    protocols: dict[str, str]
    service: str


def plan(env: Mapping[str, str]) -> Plan | None:
    """What the `OTEL_*` variables of `env` ask to export; None when nothing (the default)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    protocols: dict[str, str] = {}
    for signal in SIGNALS:
        upper = signal.upper()
        exporters = [name.strip().lower() for name in env.get(f"OTEL_{upper}_EXPORTER", "").split(",") if name.strip()]
        unsupported = [name for name in exporters if name not in ("otlp", "none")]
        if unsupported:
            log.warning(
                "otel_exporter_unsupported",
                variable=f"OTEL_{upper}_EXPORTER",
                exporter=",".join(unsupported),
                supported="otlp",
            )
        wanted = "otlp" in exporters if exporters else bool(_value(env, upper, "ENDPOINT"))
        if not wanted:
            continue
        protocol = (_value(env, upper, "PROTOCOL") or PROTOCOLS[0]).strip().lower()
        if protocol not in PROTOCOLS:
            variable = next(
                name
                for name in (f"OTEL_EXPORTER_OTLP_{upper}_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
                if env.get(name, "").strip()
            )
            log.warning(
                "otel_protocol_unsupported",
                variable=variable,
                signal=signal,
                protocol=protocol,
                supported=", ".join(PROTOCOLS),
            )
            continue
        protocols[signal] = protocol
    if not protocols:
        return None
    return Plan(protocols, env.get("OTEL_SERVICE_NAME", "").strip() or DEFAULT_SERVICE)


def _value(env: Mapping[str, str], signal: str, name: str) -> str:
    """`OTEL_EXPORTER_OTLP_{signal}_{name}`, or else the setting for every signal."""
    return (
        env.get(f"OTEL_EXPORTER_OTLP_{signal}_{name}", "").strip() or env.get(f"OTEL_EXPORTER_OTLP_{name}", "").strip()
    )


def timeouts(env: Mapping[str, str], wanted: Plan) -> dict[str, float]:
    """The export timeout of each signal of `wanted`, in seconds (as the exporters take it): the signal's
    `OTEL_EXPORTER_OTLP_{SIGNAL}_TIMEOUT`, else `OTEL_EXPORTER_OTLP_TIMEOUT`, in milliseconds, else
    EXPORT_TIMEOUT_MS. `_bad_settings` has checked them; one under SHORT_TIMEOUT_MS is a warning."""
    seconds: dict[str, float] = {}
    for signal in wanted.protocols:
        millis = int(_value(env, signal.upper(), "TIMEOUT") or EXPORT_TIMEOUT_MS)
        if millis < SHORT_TIMEOUT_MS:
            variable = next(name for name in _timeout_variables(signal) if env.get(name, "").strip())
            log.warning("otel_timeout_short", variable=variable, milliseconds=millis, unit="milliseconds")
        seconds[signal] = millis / 1000
    return seconds


def _timeout_variables(signal: str) -> tuple[str, str]:
    """The variables of a signal's timeout, the one that wins first."""
    return (f"OTEL_EXPORTER_OTLP_{signal.upper()}_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")


def _bad_settings(env: Mapping[str, str], wanted: Plan) -> list[str]:
    """The variables of `env` that `wanted` would be set up from and that make no sense, each said in an error
    line: a timeout that is not a whole number of milliseconds from 1 to MOST_TIMEOUT_MS, an endpoint that is not
    a URL, a setting of the SDK's that is not a whole number above zero."""
    bad: dict[str, str] = {}
    for signal, protocol in wanted.protocols.items():
        for name in _timeout_variables(signal):
            if (value := env.get(name, "").strip()) and not _millis(value):
                bad[name] = f"a whole number of milliseconds from 1 to {MOST_TIMEOUT_MS}"
        for name in (f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
            if (value := env.get(name, "").strip()) and not _endpoint(value, protocol):
                bad[name] = "an http:// or https:// URL" + (" or host:port" if protocol == "grpc" else "")
    for name in SDK_WHOLE_NUMBERS:
        if (value := env.get(name, "").strip()) and not _above_zero(value):
            bad[name] = "a whole number above zero"
    for name, expected in bad.items():
        shown = loggable_url(env[name])[:80]  # an endpoint's query or user info may hold the collector's key
        log.error("otel_setting_invalid", variable=name, value=shown, expected=expected, telemetry="off")
    return list(bad)


def _above_zero(value: str) -> bool:
    try:
        return int(value) > 0  # as the SDK reads it
    except ValueError:
        return False


def _millis(value: str) -> bool:
    return _WHOLE.fullmatch(value) is not None and 1 <= int(value) <= MOST_TIMEOUT_MS


def _endpoint(value: str, protocol: str) -> bool:
    url = urlsplit(value)
    if url.scheme in ("http", "https") and url.netloc:
        return True
    return protocol == "grpc" and _HOST_PORT.fullmatch(value) is not None


def start(env: Mapping[str, str]) -> Callable[[], None] | None:
    """Set up the SDK's global tracer and meter providers as `env` asks; returns what shuts them down, or None
    when nothing is configured or the SDK is not installed (then with a warning)."""
    wanted = plan(env)
    if wanted is None or _bad_settings(env, wanted):
        return None
    resource = {"service.name": wanted.service, "service.version": __version__}
    try:
        from meta_agent.records import otel_sdk

        providers = otel_sdk.install(wanted.protocols, timeouts(env, wanted), resource)
    except ImportError as exc:  # the `otel` extra is not installed (or only part of it)
        log.warning("otel_not_installed", configured=",".join(wanted.protocols), missing=exc.name, install=EXTRA)
        return None
    except ValueError as exc:  # settings the SDK refuses together (a queue smaller than a batch)
        named = ",".join(name for name in SDK_WHOLE_NUMBERS if env.get(name, "").strip())  # the ones set
        log.error("otel_setting_invalid", variables=named, error=" ".join(str(exc).split()), telemetry="off")
        return None
    return functools.partial(shut_down, providers)


def shut_down(providers: list[Any], seconds: float = SHUTDOWN_SECONDS) -> None:
    """Flush and shut down `providers` on a thread of their own, waiting for it `seconds` at most: a collector that
    is down or never answers costs the exit no more than that (the thread is a daemon, left behind)."""
    worker = threading.Thread(target=_shut_down_all, args=(providers,), name="otel-shutdown", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        log.warning("otel_export_unfinished", waited_s=seconds)


def _shut_down_all(providers: list[Any]) -> None:
    for provider in providers:
        try:
            provider.shutdown()
        except Exception:  # an exporter's failure is the collector's problem, never the command's
            log.debug("otel_shutdown_failed", exc_info=True)


@asynccontextmanager
async def exporting(env: Mapping[str, str]) -> AsyncIterator[None]:
    """The SDK set up from `env` while inside (if configured), shut down within SHUTDOWN_SECONDS on the way out,
    cancelled or not."""
    stop = start(env)
    try:
        yield
    finally:
        if stop is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(stop)


def exported(command: Callable[P, Awaitable[int]]) -> Callable[P, Awaitable[int]]:
    """`command` (`serve`'s or `run`'s) with the telemetry that the process's `OTEL_*` variables configure."""

    @functools.wraps(command)
    async def with_telemetry(*args: P.args, **kwargs: P.kwargs) -> int:
        async with exporting(os.environ):
            return await command(*args, **kwargs)

    return with_telemetry
