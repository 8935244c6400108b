"""The export timeout, by the specification: `OTEL_EXPORTER_OTLP_TIMEOUT` and the signals' own are milliseconds, and
a collector that trickles its answer a byte at a time, or accepts and never answers, holds a batch no longer than
that, over HTTP and over gRPC; the export waits on the SDK's thread, not on the one that ends spans; the spans waiting
meanwhile are bounded; and the next batches go through once the collector is back, without a restart.

The exporters are meta-agent's own (records/otel_sdk.py), with the timeouts it reads (records/otel_setup.py), in
this process, before a collector of the tests' own: a TCP front (collector_front.py) before a real receiver."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest
import structlog
from collector_front import TRICKLE_S, Behaviour, CollectorFront
from conftest import openai_env, without_otel
from fake_llm import FakeLLM, openai_reply
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from otlp_receiver import GrpcReceiver, OtlpReceiver, ReceivedSpan
from raw_stdio import raw_serving
from tls_files import local_tls

from meta_agent.records import otel_sdk, otel_setup

pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc", reason="the otel extra is not installed")

PROTOCOLS = ("http/protobuf", "grpc")
BAD: tuple[Behaviour, ...] = ("trickle", "hang")
TIMEOUT_MS = 300  # the signal's own, in these tests
EVERY_SIGNAL_MS = 60_000  # OTEL_EXPORTER_OTLP_TIMEOUT beside it, which must lose
# What a loaded machine may add to an export that gives up at its timeout: far less than a trickled answer takes
# (a hundred bytes and more, TRICKLE_S each), and than EVERY_SIGNAL_MS.
MARGIN_S = 4.0
# How long exports are tried again after the collector is back, until one goes through: gRPC's first may find its
# channel broken, and on a loaded machine an export may take longer than TIMEOUT_MS and be given up, as it should.
RECOVERY_S = 60.0


def attempts() -> Iterator[int]:
    """Attempt numbers, for RECOVERY_S."""
    deadline = time.monotonic() + RECOVERY_S
    attempt = 0
    while time.monotonic() < deadline:
        yield attempt
        attempt += 1


QUEUE = 2048  # the SDK's span queue, OTEL_BSP_MAX_QUEUE_SIZE's default
BATCH = 512  # the SDK's batch, OTEL_BSP_MAX_EXPORT_BATCH_SIZE's default


def plan_for(env: dict[str, str]) -> otel_setup.Plan:
    wanted = otel_setup.plan(env)
    assert wanted is not None
    return wanted


@pytest.mark.quick
@pytest.mark.parametrize(
    ("timeouts", "expected"),
    [
        ({}, {"traces": 10.0, "metrics": 10.0}),  # the specification's default: 10,000 ms
        ({"OTEL_EXPORTER_OTLP_TIMEOUT": "300"}, {"traces": 0.3, "metrics": 0.3}),
        ({"OTEL_EXPORTER_OTLP_TIMEOUT": " 2500 "}, {"traces": 2.5, "metrics": 2.5}),
        (
            {"OTEL_EXPORTER_OTLP_TIMEOUT": "60000", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "250"},
            {"traces": 0.25, "metrics": 60.0},
        ),
        ({"OTEL_EXPORTER_OTLP_METRICS_TIMEOUT": "1500"}, {"traces": 10.0, "metrics": 1.5}),
        (
            {"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "", "OTEL_EXPORTER_OTLP_TIMEOUT": "700"},
            {"traces": 0.7, "metrics": 0.7},
        ),
    ],
)
def test_the_timeouts_are_milliseconds_each_signals_own_first(
    timeouts: dict[str, str], expected: dict[str, float]
) -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", **timeouts}
    assert not otel_setup._bad_settings(env, plan_for(env))
    assert otel_setup.timeouts(env, plan_for(env)) == expected


@pytest.mark.quick
def test_a_timeout_meant_in_seconds_is_a_warning_naming_it() -> None:
    """`5`, as this variable was read before (and as the Python exporters read it), is 5 ms: honoured, and said."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT": "5"}
    with structlog.testing.capture_logs() as logs:
        assert otel_setup.timeouts(env, plan_for(env)) == {"traces": 10.0, "metrics": 0.005}
    [warning] = [line for line in logs if line["event"] == "otel_timeout_short"]
    assert (warning["variable"], warning["milliseconds"]) == ("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", 5)


@pytest.fixture
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No OTEL_* variable of the machine's, and no proxy: the exporters read the endpoint from os.environ."""
    for name in list(os.environ):
        if name.startswith("OTEL_") or name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)
    return monkeypatch


def exporting_to(
    monkeypatch: pytest.MonkeyPatch, url: str, protocol: str, signal: str, **more: str
) -> dict[str, float]:
    """The environment of an exporter of `signal` to `url`: the signal's timeout TIMEOUT_MS, every signal's
    EVERY_SIGNAL_MS; the timeouts meta-agent reads from it, in seconds."""
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": url,
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_EXPORTER_OTLP_TIMEOUT": str(EVERY_SIGNAL_MS),
        f"OTEL_EXPORTER_OTLP_{signal.upper()}_TIMEOUT": str(TIMEOUT_MS),
        **more,
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return otel_setup.timeouts(env, plan_for(env))


def receiver_for(protocol: str) -> OtlpReceiver | GrpcReceiver:
    return GrpcReceiver() if protocol == "grpc" else OtlpReceiver()


@pytest.fixture
def tracer_provider() -> Iterator[TracerProvider]:
    provider = TracerProvider(shutdown_on_exit=False)
    yield provider
    provider.shutdown()


def timed(action: object) -> float:
    assert callable(action)
    started = time.monotonic()
    action()
    return time.monotonic() - started


def named(name: str) -> Callable[[ReceivedSpan], bool]:
    return lambda span: span.name == name


def went_bad(front: CollectorFront) -> bool:
    """Whether an export met the collector's bad behaviour, and was given up before the trickled answer was whole."""
    if front.behaviour == "hang":
        return front.held.is_set()
    return front.trickling.is_set() and front.unsent > 0


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("behaviour", BAD)
def test_a_bad_collector_holds_a_batch_of_spans_no_longer_than_the_timeout(
    clean_environ: pytest.MonkeyPatch, tracer_provider: TracerProvider, protocol: str, behaviour: Behaviour
) -> None:
    with receiver_for(protocol) as receiver, CollectorFront(receiver.url, behaviour) as front:
        timeouts = exporting_to(clean_environ, front.url, protocol, "traces")
        tracer_provider.add_span_processor(otel_sdk.span_processor(protocol, timeouts["traces"]))
        tracer = tracer_provider.get_tracer("test")
        tracer.start_span("while bad").end()
        took = timed(tracer_provider.force_flush)
        assert went_bad(front), "the export did not meet the collector's bad behaviour"
        assert took < TIMEOUT_MS / 1000 + MARGIN_S, f"a batch took {took:.1f} s with a {behaviour} collector"

        front.recover()  # the collector is back: the next batches go through, the exporter as it is
        for attempt in attempts():
            tracer.start_span(f"after {attempt}").end()
            tracer_provider.force_flush()
            if receiver.wait_for_span(named(f"after {attempt}"), 0):
                break
        else:
            pytest.fail(f"no batch went through in {RECOVERY_S:.0f} s after the collector came back")
        for attempt in attempts():  # and the next (tried again only where a loaded machine outran the timeout)
            tracer.start_span(f"steady {attempt}").end()
            tracer_provider.force_flush()
            if receiver.wait_for_span(named(f"steady {attempt}"), 0):
                break
        else:
            pytest.fail(f"no later batch went through in {RECOVERY_S:.0f} s")


def test_through_an_http_proxy_a_trickle_holds_a_batch_no_longer(
    clean_environ: pytest.MonkeyPatch, tracer_provider: TracerProvider
) -> None:
    """The collector behind a proxy of HTTP_PROXY, which trickles what it passes back: the same bound."""
    with OtlpReceiver() as receiver, CollectorFront(receiver.url, "trickle") as proxy:
        clean_environ.setenv("HTTP_PROXY", proxy.url)
        timeouts = exporting_to(clean_environ, "http://collector.invalid:4318", "http/protobuf", "traces")
        tracer_provider.add_span_processor(otel_sdk.span_processor("http/protobuf", timeouts["traces"]))
        tracer_provider.get_tracer("test").start_span("through the proxy").end()
        took = timed(tracer_provider.force_flush)
        assert went_bad(proxy), "the export did not go through the proxy"
        assert took < TIMEOUT_MS / 1000 + MARGIN_S, f"a batch took {took:.1f} s through a trickling proxy"


class TlsCollector:
    """A collector of OTLP over HTTPS on 127.0.0.1, with the certificate of `tls`, answering each export 200; with
    `trickle`, a byte every TRICKLE_S once the handshake is done (at full speed). `received` counts the exports read,
    `answered` the whole answers sent; `trickling` is set at the first byte held back."""

    ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n"

    def __init__(self, tls: ssl.SSLContext, *, trickle: bool) -> None:
        self._tls, self._trickle = tls, trickle
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"https://127.0.0.1:{self._listener.getsockname()[1]}"
        self._stop = threading.Event()
        self.trickling = threading.Event()
        self.received = self.answered = 0
        self._accepting = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> TlsCollector:
        self._accepting.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._accepting.join(10)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            with self._tls.wrap_socket(client, server_side=True) as stream:
                _read_request(stream)
                self.received += 1
                if not self._trickle:
                    stream.sendall(self.ANSWER)
                for index in range(len(self.ANSWER) if self._trickle else 0):
                    self.trickling.set()
                    if self._stop.wait(TRICKLE_S):  # the pace of the trickle; ends when the test does
                        return
                    stream.sendall(self.ANSWER[index : index + 1])
                self.answered += 1
        except OSError:  # the client gave up
            client.close()


def _read_request(stream: ssl.SSLSocket) -> None:
    received = b""
    while b"\r\n\r\n" not in received:
        received += stream.recv(65536) or b"\r\n\r\n"
    head, _, body = received.partition(b"\r\n\r\n")
    declared = re.search(rb"(?i)\r\ncontent-length: *([0-9]+)", head)
    length = int(declared.group(1)) if declared else 0
    while len(body) < length and (more := stream.recv(65536)):
        body += more


def test_over_https_the_exporters_ca_is_the_one_trusted(
    clean_environ: pytest.MonkeyPatch, tracer_provider: TracerProvider, tmp_path: Path
) -> None:
    """OTEL_EXPORTER_OTLP_CERTIFICATE names the collector's CA; a REQUESTS_CA_BUNDLE of the environment, for every
    other use of requests, names another: the exporter trusts its own, and the export goes through."""
    tls, ca_file = local_tls(tmp_path)
    (tmp_path / "other").mkdir()
    clean_environ.setenv("REQUESTS_CA_BUNDLE", str(local_tls(tmp_path / "other")[1]))
    clean_environ.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(ca_file))
    with TlsCollector(tls, trickle=False) as collector:
        timeouts = exporting_to(clean_environ, collector.url, "http/protobuf", "traces")
        tracer_provider.add_span_processor(otel_sdk.span_processor("http/protobuf", timeouts["traces"]))
        tracer_provider.get_tracer("test").start_span("over tls").end()
        tracer_provider.force_flush()
        assert collector.received == 1


@pytest.mark.parametrize("where", ["answer", "handshake"])
def test_over_https_a_trickle_holds_a_batch_no_longer(
    clean_environ: pytest.MonkeyPatch, tracer_provider: TracerProvider, tmp_path: Path, where: str
) -> None:
    """A collector over TLS that trickles its answer once the handshake is done, or (through a trickling front) the
    handshake itself: the same bound."""
    tls, ca_file = local_tls(tmp_path)
    with TlsCollector(tls, trickle=where == "answer") as collector, contextlib.ExitStack() as fronts:
        url = collector.url
        if where == "handshake":
            front = fronts.enter_context(CollectorFront(collector.url, "trickle"))
            url = front.url.replace("http://", "https://")
        clean_environ.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(ca_file))
        timeouts = exporting_to(clean_environ, url, "http/protobuf", "traces")
        tracer_provider.add_span_processor(otel_sdk.span_processor("http/protobuf", timeouts["traces"]))
        tracer_provider.get_tracer("test").start_span("over tls").end()
        took = timed(tracer_provider.force_flush)
        assert went_bad(front) if where == "handshake" else collector.trickling.is_set()
        assert (collector.received, collector.answered) == (1 if where == "answer" else 0, 0)
        assert took < TIMEOUT_MS / 1000 + MARGIN_S, f"a batch took {took:.1f} s with a trickled {where}"


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("behaviour", BAD)
def test_a_bad_collector_holds_the_metrics_no_longer_than_the_timeout(
    clean_environ: pytest.MonkeyPatch, protocol: str, behaviour: Behaviour
) -> None:
    with receiver_for(protocol) as receiver, CollectorFront(receiver.url, behaviour) as front:
        timeouts = exporting_to(clean_environ, front.url, protocol, "metrics")
        provider = MeterProvider(metric_readers=[otel_sdk.metric_reader(protocol, timeouts["metrics"])])
        try:
            meter = provider.get_meter("test")
            meter.create_counter("while_bad").add(1)
            took = timed(provider.force_flush)
            assert went_bad(front), "the export did not meet the collector's bad behaviour"
            assert took < TIMEOUT_MS / 1000 + MARGIN_S, f"the metrics took {took:.1f} s with a {behaviour} collector"

            front.recover()
            meter.create_counter("after").add(1)
            for _ in attempts():
                provider.force_flush()
                if receiver.points("after"):
                    break
            else:
                pytest.fail(f"no export went through in {RECOVERY_S:.0f} s after the collector came back")
        finally:
            provider.shutdown()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_spans_end_while_an_export_waits(
    clean_environ: pytest.MonkeyPatch, tracer_provider: TracerProvider, protocol: str
) -> None:
    """The export runs on the span processor's thread: a collector holding it for a minute holds no one who ends
    spans (a run, the event loop). Were the export on the thread that ended the batch's last span, this thread would
    wait here the whole minute, and the held export would be over by the time it went on."""
    with receiver_for(protocol) as receiver, CollectorFront(receiver.url, "hang") as front:
        exporting_to(clean_environ, front.url, protocol, "traces")
        held_s = EVERY_SIGNAL_MS / 1000  # a minute: the export waits until the collector lets it go
        tracer_provider.add_span_processor(otel_sdk.span_processor(protocol, held_s))
        tracer = tracer_provider.get_tracer("test")
        for index in range(BATCH):  # a whole batch: the processor's thread wakes and exports it
            tracer.start_span(f"span {index}").end()
        assert front.held.wait(30)
        tracer.start_span("one more").end()
        assert front.holding == 1, "the export was over before this thread went on"
        front.recover()  # the held export fails at once, and is tried again: the spans reach the collector
        tracer_provider.force_flush()
        assert receiver.wait_for_span(named("one more"), 0)


def test_the_spans_waiting_for_a_collector_that_is_down_are_bounded(
    clean_environ: pytest.MonkeyPatch, tracer_provider: TracerProvider
) -> None:
    """Ten thousand spans while the collector never answers: the processor keeps at most its queue of them (and the
    batch it is exporting), dropping the oldest, so memory does not grow with the time the collector is away."""
    with OtlpReceiver() as receiver, CollectorFront(receiver.url, "hang") as front:
        timeouts = exporting_to(clean_environ, front.url, "http/protobuf", "traces")
        tracer_provider.add_span_processor(otel_sdk.span_processor("http/protobuf", timeouts["traces"]))
        tracer = tracer_provider.get_tracer("test")
        ended = 10_000
        for index in range(ended):
            tracer.start_span(f"span {index}").end()
        assert front.held.is_set() or front.held.wait(30)
        front.recover()
        tracer.start_span("last").end()
        tracer_provider.force_flush()
        assert receiver.wait_for_span(named("last"), 0)
        kept = len(receiver.spans)  # the queue's, the batch on its way as the collector came back, and "last"
        assert kept <= QUEUE + BATCH + 1 < ended, kept


@pytest.mark.anyio
@pytest.mark.processes
async def test_serve_exports_again_once_the_collector_is_back(llm: FakeLLM, tmp_path: Path) -> None:
    """`meta-agent serve` as a host starts it, exporting to a collector that trickles its answers: a run ends as
    usual, an export gives up on the trickle (300 ms is not 300 s), and once the collector is back, the next run's
    spans arrive, from the same process."""
    with OtlpReceiver() as receiver, CollectorFront(receiver.url, "trickle") as front:
        env = openai_env(
            llm,
            model="openai:fake-model",
            base=without_otel(),
            OTEL_EXPORTER_OTLP_ENDPOINT=front.url,
            OTEL_EXPORTER_OTLP_TIMEOUT=str(TIMEOUT_MS),
            OTEL_BSP_SCHEDULE_DELAY="50",  # a batch soon after each run
            OTEL_METRICS_EXPORTER="none",
        )
        async with raw_serving(tmp_path, "2026-07-28", env) as host:
            await host.handshake()
            run_ids = []
            for prompt in ("while bad", "once back"):
                llm.reply(openai_reply(f"answered {prompt}"))
                answer = await host.request("tools/call", {"name": "ask", "arguments": {"prompt": prompt}})
                assert answer["result"]["structuredContent"]["answer"] == f"answered {prompt}", answer
                run_ids.append(answer["result"]["structuredContent"]["run_id"])
                if prompt == "while bad":  # an export meets the trickle, and gives up at its timeout (300 ms)
                    assert await anyio.to_thread.run_sync(front.given_up.wait, 30), "no export gave up on the trickle"
                    front.recover()

            def the_second_run(span: ReceivedSpan) -> bool:
                return span.attributes.get("meta_agent.run_id") == run_ids[1]

            arrived = await anyio.to_thread.run_sync(receiver.wait_for_span, the_second_run, 30)
            assert arrived, (tmp_path / "stderr.log").read_text()
            assert host.process.returncode is None  # the same process throughout
