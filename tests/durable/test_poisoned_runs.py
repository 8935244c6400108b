"""A poisoned durable run (durable/runs.py): a step that stalls whichever replica runs it takes each
replica down in turn (the watchdog ends it with status 70, its supervisor starts it again); after
META_AGENT_MAX_RESUMES hand-ons the run is given up for good, says where it was, and the replicas serve again."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx2
import pytest
from conftest import TESTS, ServerLog, free_port
from fake_llm import FakeLLM, openai_reply
from mcp import Client
from postgres_cluster import Cluster
from replicas import fault_config, replica_environ

from meta_agent.cli.watchdog import EXIT_STALLED
from meta_agent.store.database import PostgresDatabase
from meta_agent.store.run_index import RunIndex

STALLING_SERVE = TESTS / "fixtures" / "stalling_serve.py"
MAX_RESUMES = 2
# The stall limit: long enough that a replica's start (DBOS's launch runs on the event loop) is no stall on a machine
# whose every core is busy, short enough for three stalls in a row.
STALL_SECONDS = 5
WITHIN = 300.0  # three stalls of 5 s, a lease of 2 s and a restart each: about a minute, several on a loaded machine

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(WITHIN + 60)]


class Supervisor:
    """Replicas of the stalling `meta-agent serve`, each started again when it exits, as a supervisor would."""

    def __init__(self, config: Path, environ: dict[str, str]) -> None:
        self.config, self.environ = config, environ
        self.running: list[tuple[subprocess.Popen[str], str]] = []
        self._logs: dict[int, ServerLog] = {}
        self.exits: list[int] = []

    def start(self) -> str:
        port = free_port()
        command = [sys.executable, str(STALLING_SERVE), "serve", "--transport", "http", "--port", str(port)]
        proc = subprocess.Popen(
            [*command, "--config", str(self.config)], env=self.environ, stderr=subprocess.PIPE, text=True
        )
        self._logs[proc.pid] = log = ServerLog(proc.stderr)
        log.wait_for("serving_http")
        url = f"http://127.0.0.1:{port}/mcp"
        self.running.append((proc, url))
        return url

    async def keep_up(self) -> None:
        while True:
            for proc, url in list(self.running):
                if proc.poll() is not None:
                    self.running.remove((proc, url))
                    self.exits.append(proc.returncode)
                    self._reaped(proc)
                    await anyio.to_thread.run_sync(self.start)
            await anyio.sleep(0.05)

    async def all_serving(self) -> None:
        """Wait until every replica running now answers /health (one still stalled leaves, and its successor
        starts)."""
        with anyio.fail_after(WITHIN):
            while True:
                answers = []
                async with httpx2.AsyncClient(timeout=1.0) as http:
                    for _, url in list(self.running):
                        with contextlib.suppress(httpx2.HTTPError):
                            answers.append((await http.get(url.removesuffix("/mcp") + "/health")).status_code)
                if len(answers) == len(self.running) and set(answers) == {200}:
                    return
                await anyio.sleep(0.2)

    def stop(self) -> None:
        for proc, _ in self.running:
            proc.kill()
            proc.wait(timeout=30)
            self._reaped(proc)

    def _reaped(self, proc: subprocess.Popen[str]) -> None:
        """Close the pipe of a replica that has exited, once its log has read it to the end."""
        self._logs.pop(proc.pid)._thread.join(timeout=30)
        assert proc.stderr is not None
        proc.stderr.close()


@contextlib.contextmanager
def supervised(config: Path, environ: dict[str, str], replicas: int) -> Iterator[Supervisor]:
    supervisor = Supervisor(config, environ)
    try:
        for _ in range(replicas):
            supervisor.start()
        yield supervisor
    finally:
        supervisor.stop()


async def test_a_run_that_stalls_every_replica_is_given_up_and_the_replicas_serve_again(
    database_url: str, pg_cluster: Cluster, llm: FakeLLM, tmp_path: Path
) -> None:
    environ = replica_environ(llm, database_url, tmp_path)
    environ |= {"META_AGENT_LEASE_SECONDS": "2", "META_AGENT_STALL_SECONDS": str(STALL_SECONDS)}
    environ |= {"META_AGENT_MAX_RESUMES": str(MAX_RESUMES)}
    llm.reply(openai_reply(None, ("c1", "f__echo", {"text": "freeze"})))
    index = RunIndex(PostgresDatabase(database_url), "reader")
    with supervised(fault_config(tmp_path), environ, replicas=2) as supervisor:
        first_url = supervisor.running[0][1]

        async def call_and_lose_it() -> None:
            with contextlib.suppress(Exception):  # its replica stalls and leaves
                async with Client(first_url) as client:
                    await client.call_tool("agent", {"task": "Poison."})

        async with anyio.create_task_group() as tg:
            tg.start_soon(supervisor.keep_up)
            tg.start_soon(call_and_lose_it)
            with anyio.fail_after(WITHIN):
                while not (run_id := pg_cluster.psql(database_url, "select id from runs")):
                    await anyio.sleep(0.1)
                while (state := await index.read(run_id, owner=None)) is None or state.status != "done":
                    await anyio.sleep(0.1)
            assert state.result is None
            assert state.error == f"given up after {MAX_RESUMES} resumptions; it was in step 1 (f.echo)"
            # each replica that ran it stalled and left (a stalled one's run may be handed on before it has left)
            await supervisor.all_serving()
            exits = list(supervisor.exits)
            assert exits and set(exits) == {EXIT_STALLED}
            status = f"select status from dbos.workflow_status where workflow_uuid = '{run_id}'"
            assert pg_cluster.psql(database_url, status) == "CANCELLED"  # DBOS does not resume it either
            # the replicas serve: a run of another task completes on one started again after a stall
            llm.reply(openai_reply("Still here."))
            async with Client(supervisor.running[-1][1]) as client:
                result = await client.call_tool("agent", {"task": "Are you there?"})
            assert result.structured_content["answer"] == "Still here."  # type: ignore[index]
            assert supervisor.exits == exits  # none left since
            tg.cancel_scope.cancel()
    index.database.close()
