"""The HTTP front is not held by connections that never finish a request, nor spun by a process out of descriptors
(README, Commands: `serve --transport http`), against a real `meta-agent serve --transport http` under a low `ulimit -n`.

Half-sent requests: more connections than the process may open files, each sending part of a request's head and
then nothing. Out of descriptors: the server's limit lowered to just above what it holds, then connections beyond
it. In both, /health must answer while the connections stay open, and the server must not spin (its CPU time over a
few seconds, from psutil). Everything is on 127.0.0.1; every connection the test opens is closed at the end.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx2
import psutil
from conftest import free_port

FD_LIMIT = 200  # `ulimit -n 200`
HALF_OPEN = 250  # connections sending half a request: more than the process may hold
HALF_A_HEAD = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Never-Ending: "
START_BOUND = 60.0  # seconds for the server to start on a loaded machine
# Seconds within which /health must answer with the connections open: the server's own time limit for a request to
# arrive whole is well under it, so it holds with or without the eviction of the oldest half-sent request.
HEALTH_BOUND = 30.0
PROBE_TIMEOUT = 5.0  # seconds for one /health probe
CPU_WINDOW = 3.0  # seconds over which the server's CPU time is measured
# Share of one core the server may use meanwhile: it has nothing to do. Spinning on EMFILE takes nearly all of it.
CPU_BOUND = 0.3
OVER_THE_LIMIT = 40  # connections made once the server's limit is just above what it holds
FDS_TO_SPARE = 4  # descriptors left to the server under its lowered limit
# Failed accept() calls while out of descriptors: the accept loop rests a second after each, so a few over the window.
# asyncio's own loop made thousands (it calls again after a failure, up to the listen backlog's 2,048, and retries
# each).
ACCEPTS_FAILED_BOUND = 3 * CPU_WINDOW


@contextmanager
def limited_server(tmp_path: Path) -> Iterator[tuple[int, psutil.Process]]:
    """`meta-agent serve --transport http` under `ulimit -n 200`, without children: its port and process."""
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {}}))
    environ = {
        **os.environ,
        "META_AGENT_TRACE_DIR": str(tmp_path / "traces"),
        "META_AGENT_CONVERSATIONS_DB": str(tmp_path / "c.db"),
    }
    port = free_port()
    log = tmp_path / "serve.log"
    command = [sys.executable, "-m", "meta_agent", "serve", "--transport", "http", "--port", str(port)]
    with log.open("w") as stderr:
        proc = subprocess.Popen([*command, "--config", str(config)], env=environ, stderr=stderr)
    try:
        resource.prlimit(proc.pid, resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))  # no preexec_fn: pytest has threads
        deadline = time.monotonic() + START_BOUND
        while "serving_http" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.05)
        yield port, psutil.Process(proc.pid)
    finally:
        proc.kill()
        proc.wait(timeout=30)


def half_sent(port: int, count: int, stack: ExitStack) -> None:
    """`count` connections to the server, each sending half a request's head; closed when `stack` closes."""
    for _ in range(count):
        sock = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=PROBE_TIMEOUT))
        sock.sendall(HALF_A_HEAD)


def health_within(port: int, bound: float) -> tuple[int, float]:
    """The status /health answers, probed again until `bound` seconds have passed, and how long it took (0 if it
    never answered)."""
    started = time.monotonic()
    while time.monotonic() - started < bound:
        try:
            response = httpx2.get(f"http://127.0.0.1:{port}/health", timeout=PROBE_TIMEOUT)
        except httpx2.HTTPError:
            continue
        if response.status_code == 200:
            return 200, time.monotonic() - started
    return 0, bound


def cpu_share(server: psutil.Process, seconds: float) -> float:
    """The share of one core the server used over the next `seconds` (a measurement window, not a synchronisation)."""
    before, started = server.cpu_times(), time.monotonic()
    time.sleep(seconds)
    after, took = server.cpu_times(), time.monotonic() - started
    return (after.user + after.system - before.user - before.system) / took


def test_half_sent_requests_neither_hold_health_nor_spin_the_server(tmp_path: Path) -> None:
    with limited_server(tmp_path) as (port, server), ExitStack() as stack:
        half_sent(port, HALF_OPEN, stack)
        status, took = health_within(port, HEALTH_BOUND)
        share = cpu_share(server, CPU_WINDOW)
        assert (status, share < CPU_BOUND) == (200, True), (took, share)


def test_a_server_out_of_descriptors_backs_off_and_answers_once_they_are_back(tmp_path: Path) -> None:
    with limited_server(tmp_path) as (port, server), ExitStack() as stack:
        held = server.num_fds()
        resource.prlimit(server.pid, resource.RLIMIT_NOFILE, (held + FDS_TO_SPARE, FD_LIMIT))
        try:
            half_sent(port, OVER_THE_LIMIT, stack)
            share = cpu_share(server, CPU_WINDOW)
        finally:
            resource.prlimit(server.pid, resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))
        status, took = health_within(port, HEALTH_BOUND)
        failed = failed_accepts(tmp_path / "serve.log")
        # it did run out (the lines are there to count), and rested between its tries
        assert (share < CPU_BOUND, 1 <= failed <= ACCEPTS_FAILED_BOUND, status) == (True, True, 200), (
            share,
            failed,
            took,
        )


def failed_accepts(log: Path) -> int:
    """The accept() calls that failed for want of descriptors, as the server's log counts them (each line written,
    and the repeats it says were held back before it)."""
    lines = [json.loads(line) for line in log.read_text().splitlines() if "http_accept_failed" in line]
    return sum(1 + line.get("repeated", 0) for line in lines)
