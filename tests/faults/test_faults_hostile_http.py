"""The fault suite's hostile HTTP group (tests/faults/test_faults.py describes the suite; the harness is
tests/fixtures/fault_harness.py).

hostile_http: our real server behind its real HTTP front (`serve_http`, uvicorn, on 127.0.0.1 in this process) with a
connection cap of CAP and REQUEST_TIMEOUT seconds for a request to arrive whole. Callers that never finish a request:
twice CAP connections that send half a request's head (while they stay open, /health answers: the longest waiting
is closed for a new one), a connection that sends nothing, one that trickles its head a byte at a time, and one that
sends a head and then a body far slower than MIN_BODY_RATE. Each of the last three is closed by the server within a
bound (the first two answered 408), and /health answers after them all. Then connections reset as soon as they are
made, and WebSocket upgrades (answered as plain requests), each of which gives its place under the cap back. Each
connection closed for the cap is a warning (held to one a second by the log's repeat limit when rendered).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import anyio
import anyio.abc
import httpx2
import pytest
from conftest import openai_env
from fake_llm import FakeLLM
from fault_harness import LOG, MODEL, WAIT, group, injecting, log_to_a_list  # noqa: F401  (this module's fixtures)
from fault_tally import TALLY

from meta_agent.config.settings import Settings
from meta_agent.front.http import limits
from meta_agent.front.http.app import http_app
from meta_agent.front.http.serve import serve_http
from meta_agent.front.server import build_server

pytestmark = pytest.mark.anyio

GROUPS = {"hostile_http"}
TALLY.expected_groups |= GROUPS
CATEGORY = "hostile_input"

CAP = 8  # connections at once (the cap a file limit of 16 would give)
REQUEST_TIMEOUT = 0.5  # seconds for a request to arrive whole: short, so that the group takes seconds
CLOSED_WITHIN = 10.0  # seconds within which the server closes a request that will never be whole
TRICKLE = 0.05  # seconds between the bytes of a trickled request
HALF_A_HEAD = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Never-Ending: "
SLOW_BODY_HEAD = (
    b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
)
TOO_SLOW = b"HTTP/1.1 408 "
WEBSOCKET_UPGRADE = (
    b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)
HEALTH_THEN_CLOSE = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"


@asynccontextmanager
async def served(llm: FakeLLM) -> AsyncIterator[int]:
    """Our server without children over HTTP on 127.0.0.1, in this process: its port."""
    server = build_server(Settings(model=MODEL), {}, openai_env(llm))
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    async with anyio.create_task_group() as tg:
        tg.start_soon(serve_http, http_app(server, host="127.0.0.1"), [sock])
        with anyio.fail_after(WAIT):
            while await health(port) != 200:
                await anyio.sleep(0.05)
        yield port
        tg.cancel_scope.cancel()


async def health(port: int) -> int:
    """The status /health answers, 0 for no answer."""
    try:
        async with httpx2.AsyncClient(timeout=WAIT) as http:
            return (await http.get(f"http://127.0.0.1:{port}/health")).status_code
    except httpx2.HTTPError:
        return 0


async def connected(port: int, stack: AsyncExitStack, sent: bytes = b"") -> anyio.abc.SocketStream:
    stream = await stack.enter_async_context(await anyio.connect_tcp("127.0.0.1", port))
    if sent:
        await stream.send(sent)
    return stream


def closed_at_cap() -> int:
    """The connections closed for the cap so far, as the log says."""
    return sum(event.get("event") == "http_connection_closed_at_cap" for event in LOG)


def reset_at_once(port: int) -> None:
    """A connection to the server, reset (RST, not FIN) as soon as it is made."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


async def answer_then_closed(stream: anyio.abc.SocketStream, trickled: bytes = b"") -> bytes:
    """What the server sends before it closes the connection (within CLOSED_WITHIN), `trickled` sent meanwhile a
    byte at a time until it does."""
    received = b""
    with anyio.fail_after(CLOSED_WITHIN):
        async with anyio.create_task_group() as tg:

            async def trickle() -> None:
                for byte in trickled:
                    await stream.send(bytes([byte]))
                    await anyio.sleep(TRICKLE)

            if trickled:
                tg.start_soon(trickle)
            try:
                while True:
                    received += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                tg.cancel_scope.cancel()
    return received


async def test_hostile_http(llm: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "REQUEST_TIMEOUT", REQUEST_TIMEOUT)
    monkeypatch.setattr(limits, "connection_cap", lambda: CAP)
    async with group("hostile_http", CATEGORY), served(llm) as port, injecting(CATEGORY, 5) as faults:
        async with AsyncExitStack() as stack:
            for _ in range(2 * CAP):
                await connected(port, stack, HALF_A_HEAD)
            assert await health(port) == 200  # while all of them are open
            told = [event for event in LOG if event.get("event") == "http_connection_closed_at_cap"]
            assert len(told) >= CAP and all(event["cap"] == CAP for event in told), told
            faults.handled()
        async with AsyncExitStack() as stack:
            silent, trickling, slow_body = [await connected(port, stack) for _ in range(3)]
            assert (await answer_then_closed(silent)).startswith(TOO_SLOW)
            faults.handled()
            assert (await answer_then_closed(trickling, HALF_A_HEAD * 4)).startswith(TOO_SLOW)
            faults.handled()
            await slow_body.send(SLOW_BODY_HEAD)
            assert b"200 OK" not in await answer_then_closed(slow_body, b"{" * 200)
            faults.handled()
        assert await health(port) == 200
        # Callers that reset their connection as soon as it is made, or ask for a WebSocket: each gives its place under
        # the cap back (an upgrade's too, once its time limit has passed), so CAP - 1 half-sent requests and a
        # /health fit after them without a connection closed for the cap. Tried again within
        # CLOSED_WITHIN, since the server sees the resets a little later; each try waits until the server has closed
        # its own connections, so a place that never came back fails every try.
        for _ in range(3 * CAP):
            reset_at_once(port)
        for _ in range(CAP):  # and WebSocket upgrades, which nothing here speaks: answered as plain requests
            async with await anyio.connect_tcp("127.0.0.1", port) as upgrade:
                await upgrade.send(WEBSOCKET_UPGRADE)
                assert (await upgrade.receive()).startswith(b"HTTP/1.1 ")
        async with await anyio.connect_tcp("127.0.0.1", port) as silent:  # its 408 comes after their time limits
            assert (await answer_then_closed(silent)).startswith(TOO_SLOW)
        closed: list[int] = []
        with anyio.move_on_after(CLOSED_WITHIN):
            while not closed or closed[-1] > 0:
                closed_before = closed_at_cap()
                async with AsyncExitStack() as stack:
                    held = [await connected(port, stack, HALF_A_HEAD) for _ in range(CAP - 1)]
                    probe = await connected(port, stack, HEALTH_THEN_CLOSE)
                    assert (await answer_then_closed(probe)).startswith(b"HTTP/1.1 200 ")
                    for stream in held:  # the server closes each on its end of stream (no request will come)
                        await stream.send_eof()
                        await answer_then_closed(stream)
                closed.append(closed_at_cap() - closed_before)
        assert closed and closed[-1] == 0, closed
        faults.handled()
