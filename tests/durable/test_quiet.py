"""An idle replica on PostgreSQL sleeps (durable/quiet.py; docs/replicas.md, "What durability costs"): DBOS's loops
that meta-agent needs nothing from are slowed through DBOS's private names, and its notifications are off. If a
release of DBOS renames one of them, these tests fail, rather than the polling coming back unnoticed; what the idle
replica then costs is measured in benchmarks/replicas.py."""

from __future__ import annotations

import asyncio

import anyio
import pytest
from conftest import openai_env
from fake_llm import FakeLLM, openai_reply

from meta_agent.config.settings import Settings
from meta_agent.durable import quiet
from meta_agent.durable.runs import DBOS_THREADS
from meta_agent.engine import Engine

pytestmark = pytest.mark.anyio


def test_the_private_names_quiet_sets_are_dbos_own() -> None:
    from dbos import DBOS, _workflow_commands
    from dbos._dbos import DBOSRegistry
    from dbos._event_loop import BackgroundEventLoop
    from dbos._queue import Queue
    from dbos._sys_db import SystemDatabase

    assert isinstance(_workflow_commands._BACKGROUND_JOBS_INTERVAL_SEC, float)
    assert callable(DBOSRegistry.get_internal_queue)
    assert "_polling_interval_sec" in Queue.__init__.__code__.co_names
    assert callable(SystemDatabase.list_queues)
    assert callable(BackgroundEventLoop.set_main_loop)
    assert "_background_event_loop" in DBOS.__init__.__code__.co_names


def test_the_queue_is_polled_as_often_as_runs_are_looked_for_up_to_a_few_seconds() -> None:
    assert quiet.queue_poll(0.5) == 0.5
    assert quiet.queue_poll(10.0) == quiet.LONGEST_QUEUE_POLL


async def test_a_replica_on_postgresql_launches_dbos_quiet_and_its_runs_still_complete(
    database_url: str, llm: FakeLLM, tmp_path: object
) -> None:
    from dbos import DBOS, _workflow_commands
    from dbos._dbos import _get_dbos_instance

    settings = Settings(model="openai:fake-model", database_url=database_url, trace_dir=tmp_path, lease_seconds=3)
    llm.reply(openai_reply("Done."))
    async with Engine(settings, {}, openai_env(llm)) as engine:
        dbos = _get_dbos_instance()
        assert _workflow_commands._BACKGROUND_JOBS_INTERVAL_SEC == quiet.BACKGROUND_JOBS_EVERY
        assert dbos._registry.get_internal_queue()._polling_interval_sec == 1.0  # a third of the lease
        assert dbos._sys_db.list_queues(application_name="meta-agent") == []
        assert dbos._sys_db.use_listen_notify is False
        assert dbos._background_event_loop.target_loop() is asyncio.get_running_loop()  # launched on a worker thread
        result = await engine.run("Say done.", mode="agent")
        assert result.answer == "Done."
        status = await DBOS.get_workflow_status_async(result.run_id)
        assert status is not None and status.status == "SUCCESS"


async def test_runs_at_once_hand_dbos_statements_to_a_few_threads(
    database_url: str, llm: FakeLLM, tmp_path: object
) -> None:
    """Left to its default, DBOS starts a thread for each statement waiting when none is free: dozens under a burst,
    taking turns on the interpreter's lock (docs/replicas.md, "What durability costs"). A replica's runs use at most
    DBOS_THREADS."""
    import threading

    from dbos._dbos import _get_dbos_instance

    runs = 16
    settings = Settings(model="openai:fake-model", database_url=database_url, trace_dir=tmp_path, lease_seconds=3)
    for _ in range(runs):
        llm.reply(openai_reply("Done."), delay=0.05)  # the runs overlap: each holds its start while the model answers
    async with Engine(settings, {}, openai_env(llm)) as engine:
        assert _get_dbos_instance()._executor._max_workers == DBOS_THREADS

        async def one() -> None:
            assert (await engine.run("Say done.", mode="agent")).answer == "Done."

        async with anyio.create_task_group() as tg:
            for _ in range(runs):
                tg.start_soon(one)
        started = [t.name for t in threading.enumerate() if t.name.startswith("dbos-executor-")]
        assert 0 < len(started) <= DBOS_THREADS, started
