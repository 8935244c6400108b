"""A PostgreSQL that answers every statement 200 ms late (issue 44's hostile input): a replica's durable runs slow
down and finish, and a call that changes things is made once per run, never twice (no run is taken for lost and
handed on while its replica is merely slow). The delay is a TCP proxy in this test between the replica and the
database, holding back each of the replica's writes to the server by DELAY."""

from __future__ import annotations

import math
import os
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import anyio
import anyio.abc
import pytest
from fake_llm import FakeLLM, openai_reply
from mcp import Client
from postgres_cluster import Cluster
from replicas import fault_config, replica, replica_environ

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.timeout(400),
    # the mechanism (DBOS launched off the event loop) is tests/durable/test_quiet.py's, in every run
    pytest.mark.skipif(
        not os.environ.get("META_AGENT_LONG_TESTS"),
        reason="runs on a database 200 ms late take 2-3 minutes: run it with META_AGENT_LONG_TESTS=1",
    ),
]

DELAY = 0.2
RUNS = 3


@contextmanager
def slow_proxy(url: str) -> Iterator[str]:
    """`url` (PostgreSQL) behind a proxy on 127.0.0.1 that delays what the client sends by DELAY, served by a thread
    of its own (the replica's start is waited for on this one): the proxy's URL."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 5432
    ready: queue.Queue[int] = queue.Queue()
    stop = threading.Event()

    async def pump(source: anyio.abc.ByteStream, sink: anyio.abc.ByteStream, delay: float) -> None:
        send, receive = anyio.create_memory_object_stream[tuple[float, bytes]](math.inf)

        async def later() -> None:
            async with receive:
                async for due, chunk in receive:
                    await anyio.sleep(max(0.0, due - anyio.current_time()))  # the delay being injected
                    await sink.send(chunk)

        async with anyio.create_task_group() as tg:
            tg.start_soon(later)
            async with send:
                with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    async for chunk in source:
                        await send.send((anyio.current_time() + delay, chunk))

    async def handle(client: anyio.abc.SocketStream) -> None:
        with suppress(OSError):
            async with client, await anyio.connect_tcp(host, port) as server, anyio.create_task_group() as tg:
                tg.start_soon(pump, client, server, DELAY)
                await pump(server, client, 0.0)
                tg.cancel_scope.cancel()

    async def serve() -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, handle)
            ready.put(listener.extra(anyio.abc.SocketAttribute.local_port))
            await anyio.to_thread.run_sync(stop.wait)
            tg.cancel_scope.cancel()

    thread = threading.Thread(target=anyio.run, args=(serve,), daemon=True)
    thread.start()
    proxy_port = ready.get(timeout=30)
    user, _, _ = parts.netloc.rpartition("@")
    where = f"127.0.0.1:{proxy_port}"
    try:
        yield urlunsplit(parts._replace(netloc=f"{user}@{where}" if user else where))
    finally:
        stop.set()
        thread.join(timeout=30)


async def test_runs_on_a_database_200_ms_late_per_statement_finish_and_change_things_once(
    database_url: str, pg_cluster: Cluster, llm: FakeLLM, tmp_path: Path
) -> None:
    config = fault_config(tmp_path, {"append": "always"})
    changes = tmp_path / "changes.txt"
    for n in range(RUNS):
        llm.reply(
            openai_reply(None, (f"c{n}", "f__append", {"path": str(changes), "text": f"run {n}"})), match=f"do {n}."
        )
        llm.reply(openai_reply(f"done {n}"), match=f'"c{n}"')
    with replica(config, replica_environ(llm, database_url, tmp_path)):
        pass  # the schemas (meta-agent's and DBOS's) made at full speed: what is slowed is the runs
    with slow_proxy(database_url) as slow_url:
        environ = replica_environ(llm, slow_url, tmp_path)
        with replica(config, environ) as (_, url, log):
            answers: dict[int, str] = {}

            async def one(n: int) -> None:
                async with Client(url) as client:
                    result = await client.call_tool("agent", {"task": f"do {n}."})
                assert not result.is_error, (result, log.lines[-30:])
                answers[n] = (result.structured_content or {}).get("answer", "")

            try:
                with anyio.fail_after(240):  # a bound only a hang reaches: each run is some 60 statements, 200 ms each
                    async with anyio.create_task_group() as tg:
                        for n in range(RUNS):
                            tg.start_soon(one, n)
            except BaseException:
                print("".join(log.lines[-40:]))
                raise
    assert answers == {n: f"done {n}" for n in range(RUNS)}
    assert sorted(changes.read_text().splitlines()) == [f"run {n}" for n in range(RUNS)]
    runs = pg_cluster.psql(database_url, "select status, count(*) from runs group by status")
    assert runs == f"done|{RUNS}"
