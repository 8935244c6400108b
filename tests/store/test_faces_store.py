"""What the views keep, on SQLite and on PostgreSQL: a subject's tool choices (store/preferences.py), the approvals a
view may answer (store/app_questions.py) and a run's events (store/run_events.py). Two handles on one PostgreSQL
database stand for two replicas: what one writes, the other reads and answers; one answer per question, whoever
gives it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from meta_agent.store.app_questions import AppQuestions, Settled
from meta_agent.store.database import Database, PostgresDatabase, SqliteDatabase
from meta_agent.store.preferences import Preferences, PreferenceStore
from meta_agent.store.run_events import RunEvents

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", "postgresql"])
def replicas(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Database, Database]]:
    """Two handles on one database, as two replicas have; closed after the test."""
    if request.param == "sqlite":
        pair: tuple[Database, Database] = (
            SqliteDatabase(tmp_path / "s.sqlite3"),
            SqliteDatabase(tmp_path / "s.sqlite3"),
        )
    else:
        url = request.getfixturevalue("database_url")
        pair = (PostgresDatabase(url), PostgresDatabase(url))
    yield pair
    for database in pair:
        database.close()


async def test_a_subjects_choices_are_its_own_and_every_replicas(replicas: tuple[Database, Database]) -> None:
    one, other = PreferenceStore(replicas[0]), PreferenceStore(replicas[1])
    await one.set_tool("alice", "f.echo", enabled=False, trust=None)
    await one.set_tool("alice", "f.delete_file", enabled=None, trust="always")
    await one.set_tool("alice", "f.echo", enabled=None, trust="never")  # None keeps the switch as it was
    await one.set_mode("alice", "plan")
    await one.set_mode("alice", "ask")
    assert await other.of("alice") == Preferences(
        off=frozenset({"f.echo"}), trust={"f.echo": "never", "f.delete_file": "always"}, mode="ask"
    )
    assert await other.of("bob") == Preferences()
    await other.set_tool("alice", "f.echo", enabled=True, trust=None)
    assert (await one.of("alice")).off == frozenset()


async def test_one_answer_per_question_whichever_replica_gives_it(replicas: tuple[Database, Database]) -> None:
    asking, answering = AppQuestions(replicas[0]), AppQuestions(replicas[1])
    await asking.ask("run-1", "k1", "alice", 2, "f.delete_file", {"path": "/tmp/a", "odd": "\u202e\x00"})
    (question,) = await answering.pending("run-1")
    assert (question.key, question.step, question.name) == ("k1", 2, "f.delete_file")
    assert question.arguments == {"path": "/tmp/a", "odd": "\u202e\x00"}
    assert await answering.settle("run-1", "k1", "bob", Settled(allowed=True, answer="yes")) is None  # not bob's
    allow, deny = Settled(allowed=True, answer="allowed"), Settled(allowed=False, answer="denied")
    results = []

    async def answer(store: AppQuestions, settled: Settled) -> None:
        results.append(await store.settle("run-1", "k1", None, settled))

    async with anyio.create_task_group() as tg:  # two answers at once, through two replicas
        tg.start_soon(answer, asking, deny)
        tg.start_soon(answer, answering, allow)
    taken = [settled for settled, won in results if won]  # type: ignore[misc]
    assert len(taken) == 1 and {settled for settled, _ in results} == set(taken)  # type: ignore[misc]
    assert await asking.answer_of("run-1", "k1") == taken[0] and await answering.pending("run-1") == []


async def test_events_written_by_one_replica_are_read_by_another(replicas: tuple[Database, Database]) -> None:
    writer, reader = RunEvents(replicas[0]), RunEvents(replicas[1])
    await writer.append("run-1", [(1, json.dumps({"kind": "model_turn"})), (2, json.dumps({"kind": "thinking"}))])
    assert await reader.page("run-1", 1) == ([(2, '{"kind": "thinking"}')], False)
    assert await reader.last("run-1") == 2 and await reader.last("run-2") == 0
