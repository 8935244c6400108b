"""The shared-state database: numbered migrations on SQLite and on a real PostgreSQL (a throwaway cluster, see
postgres_cluster.py), a newer schema refused in one line, replicas migrating together, conversations held across
processes on PostgreSQL, and two real `meta-agent serve --transport http` replicas sharing a conversation."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import pytest
from conftest import FAULT_SERVER, http_serving, openai_env
from fake_llm import FakeLLM, openai_reply
from mcp import Client
from mcp.shared.exceptions import MCPError
from postgres_cluster import Cluster
from replicas import fault_config, read_run, replica_environ

from meta_agent.config.servers import ServerEntry
from meta_agent.config.settings import Settings
from meta_agent.core.messages import AssistantMessage, ImagePart, UserMessage
from meta_agent.core.result import RunResult, RunUsage
from meta_agent.errors import ConfigError
from meta_agent.front.server import build_server
from meta_agent.shared.urls import loggable_url
from meta_agent.store.conversations import Conversations
from meta_agent.store.database import (
    MIGRATIONS,
    Database,
    PostgresDatabase,
    Sql,
    SqliteDatabase,
    check,
    one_statement,
)
from meta_agent.store.run_index import RunIndex

pytestmark = pytest.mark.anyio


def version(sql: Sql) -> int:
    row = sql.one("select version from meta_agent_schema")
    assert row is not None
    return int(row[0])


def set_version(sql: Sql, value: int) -> None:
    sql.execute("update meta_agent_schema set version = ?", (value,))


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Database:
    if request.param == "sqlite":
        return SqliteDatabase(tmp_path / "state.sqlite3")
    return PostgresDatabase(request.getfixturevalue("database_url"))


def test_a_new_database_gets_every_migration_once(database: Database) -> None:
    assert database.run(version) == len(MIGRATIONS)
    database.run(lambda sql: sql.execute("insert into conversations (id, messages, updated) values ('a', '[]', 'x')"))
    database.close()
    assert database.run(version) == len(MIGRATIONS)  # opened again: nothing re-run, nothing lost
    assert database.run(lambda sql: sql.one("select count(*) from conversations")) == (1,)
    database.close()


def test_a_newer_schema_is_refused_in_one_line(database: Database) -> None:
    database.run(set_version, len(MIGRATIONS) + 1)
    database.close()
    with pytest.raises(ConfigError) as refused:
        database.run(version)
    assert str(refused.value) == (
        f"{database.label}: the database's schema is version {len(MIGRATIONS) + 1}, newer than this meta-agent knows "
        f"({len(MIGRATIONS)}): upgrade meta-agent, or give it another database"
    )


def test_a_failed_transaction_changes_nothing(database: Database) -> None:
    def half(sql: Sql) -> None:
        sql.execute("insert into conversations (id, messages, updated) values ('a', '[]', 'x')")
        raise RuntimeError("midway")

    with pytest.raises(RuntimeError):
        database.run(half)
    assert database.run(lambda sql: sql.one("select count(*) from conversations")) == (0,)
    database.close()


async def test_calls_from_the_event_loop_take_turns_on_one_thread_in_order(database: Database) -> None:
    """`call` runs each transaction on the database's own thread, in the order handed in; an error reaches its caller
    alone, as raised, and every other caller gets its own answer."""
    threads: list[str] = []
    order: list[int] = []

    def insert(sql: Sql, i: int) -> int:
        threads.append(threading.current_thread().name)
        order.append(i)
        if i == 13:
            raise ValueError("thirteen")
        sql.execute("insert into conversations (id, messages, updated) values (?, '[]', 'x')", (f"c{i:02}",))
        return i

    answers: dict[int, Any] = {}

    async def one(i: int) -> None:
        try:
            answers[i] = await database.call(insert, i)
        except ValueError as exc:
            answers[i] = exc

    async with anyio.create_task_group() as tg:
        for i in range(40):
            tg.start_soon(one, i)
    assert {i: a for i, a in answers.items() if i != 13} == {i: i for i in range(40) if i != 13}
    assert str(answers[13]) == "thirteen"
    assert set(threads) == {"meta-agent-database"}
    assert order == list(range(40))  # the tasks handed them in in that order
    assert await database.call(lambda sql: sql.one("select count(*) from conversations")) == (39,)
    database.close()


async def test_a_caller_cancelled_meanwhile_waits_for_its_transaction_to_end(tmp_path: Path) -> None:
    """Like a worker thread's, a transaction handed in is waited for to its end: the call returns once it has
    ended, what it wrote is there, and the caller's cancellation comes at its next checkpoint."""
    database = SqliteDatabase(tmp_path / "state.sqlite3")
    started, release = threading.Event(), threading.Event()

    def slow(sql: Sql) -> None:
        started.set()
        assert release.wait(30)
        sql.execute("insert into conversations (id, messages, updated) values ('slow', '[]', 'x')")

    returned = False
    with anyio.CancelScope() as scope:

        async def cancel_once_started() -> None:
            await anyio.to_thread.run_sync(started.wait, 30)
            scope.cancel()
            release.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(cancel_once_started)
            await database.call(slow)
            returned = True
            await anyio.lowlevel.checkpoint()
            pytest.fail("the cancellation did not come")
    assert returned and scope.cancelled_caught
    assert await database.call(lambda sql: sql.one("select count(*) from conversations")) == (1,)
    database.close()


async def test_the_database_thread_ends_when_idle_and_starts_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No transaction for LANE_IDLE_SECONDS: the database's thread ends (an idle engine keeps no thread for it), and
    the next call starts one again."""
    from meta_agent.store import database as module

    monkeypatch.setattr(module, "LANE_IDLE_SECONDS", 0.05)
    database = SqliteDatabase(tmp_path / "state.sqlite3")
    assert await database.call(version) == len(MIGRATIONS)
    lane = database._lane
    assert lane is not None
    await anyio.to_thread.run_sync(lane.join, 30)
    assert database._lane is None
    assert await database.call(version) == len(MIGRATIONS)
    database.close()


def test_a_one_statement_work_is_a_transaction_by_itself_and_held_to_one_statement(database: Database) -> None:
    """On PostgreSQL a work marked `one_statement` is sent without BEGIN and COMMIT: its statement starts its own
    transaction (a statement after a BEGIN starts later than its transaction). A second statement raises."""

    def alone(sql: Sql) -> Any:
        return sql.one("select transaction_timestamp() = statement_timestamp()")

    if database.postgres:
        assert database.run(alone) == (False,)  # in a transaction begun by an earlier round trip
        assert database.run(one_statement(alone)) == (True,)

    @one_statement
    def two(sql: Sql) -> None:
        sql.execute("insert into conversations (id, messages, updated) values ('a', '[]', 'x')")
        sql.execute("insert into conversations (id, messages, updated) values ('b', '[]', 'x')")

    with pytest.raises(RuntimeError, match="second statement"):
        database.run(two)
    database.close()


def test_replicas_starting_together_migrate_once(database_url: str) -> None:
    replicas = [PostgresDatabase(database_url) for _ in range(4)]
    versions: list[int] = []
    failures: list[BaseException] = []
    start = threading.Barrier(len(replicas))

    def open_one(db: Database) -> None:
        start.wait()
        try:
            versions.append(db.run(version))
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=open_one, args=(db,)) for db in replicas]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failures == [] and versions == [len(MIGRATIONS)] * len(replicas)
    assert replicas[0].run(lambda sql: sql.one("select count(*) from meta_agent_schema")) == (1,)
    for db in replicas:
        db.close()


def test_an_unreachable_database_is_named_without_user_info_or_query(pg_cluster: Cluster) -> None:
    """libpq takes the password in the URL's user info or in its query (`?password=`): the name that errors and log
    lines give the database holds neither, whichever it was."""
    url = pg_cluster.database("no_such_database")
    parts = urlsplit(url)
    assert parts.password and parts.username
    in_query = f"{parts.scheme}://{parts.hostname}:{parts.port}{parts.path}"
    in_query += f"?user={parts.username}&password={parts.password}&connect_timeout=10"
    for given in (url, in_query):
        db = PostgresDatabase(given)
        assert db.label == f"{parts.scheme}://{parts.hostname}:{parts.port}/no_such_database"
        with pytest.raises(db.errors) as failed:  # the password works: it is the database that is not there
            db.run(version)
        assert "no_such_database" in str(failed.value) and parts.password not in str(failed.value)
        db.close()


def test_a_database_a_replica_cannot_reach_is_one_line_without_its_password(pg_cluster: Cluster) -> None:
    url = pg_cluster.database("no_such_database")
    password = urlsplit(url).password
    assert password
    with pytest.raises(ConfigError) as refused:
        check(url)
    assert str(refused.value).startswith(f"META_AGENT_DATABASE_URL: cannot use {loggable_url(url)}: ")
    assert "no_such_database" in str(refused.value) and password not in str(refused.value)
    assert "\n" not in str(refused.value)


async def test_turns_on_postgresql_wait_for_the_one_holding_the_conversation(database_url: str) -> None:
    """Two stores on one database, as two replicas: the second turn waits for the first, then sees its save."""
    first, second = (Conversations(PostgresDatabase(database_url), lease_seconds=5) for _ in range(2))
    second.wait_notice = 0.05  # it tells its caller it waits: then it has met the first turn's hold
    async with first.turn(None) as new:
        await first.save(new, [UserMessage.of("one"), AssistantMessage(text="1")])
    order: list[str] = []
    waiting = anyio.Event()

    async def told(seconds: float) -> None:
        waiting.set()

    async def other() -> None:
        async with second.turn(new.conversation_id, waiting=told) as turn:
            order.append(f"second saw {len(turn.history)} messages")

    async with first.turn(new.conversation_id) as held, anyio.create_task_group() as tg:
        tg.start_soon(other)
        await waiting.wait()
        order.append("first saves")
        await first.save(held, [*held.history, UserMessage.of("two"), AssistantMessage(text="2")])
    assert order == ["first saves", "second saw 4 messages"]
    first.close()
    second.close()


@pytest.mark.parametrize("era", ["2026-07-28", "2025-11-25"])
async def test_a_conversation_started_on_one_replica_continues_on_the_other(
    era: str, database_url: str, pg_cluster: Cluster, llm_endpoint: FakeLLM, tmp_path: Path
) -> None:
    config = fault_config(tmp_path)
    environ = replica_environ(llm_endpoint, database_url, tmp_path)
    mode = "legacy" if era == "2025-11-25" else "auto"
    with http_serving(config, environ) as (one, _), http_serving(config, environ) as (other, _):
        llm_endpoint.reply(openai_reply("Noted: 42."))
        async with Client(f"{one}/mcp", mode=mode) as client:
            assert client.protocol_version == era
            first = await client.call_tool("agent", {"task": "Remember 42."})
        assert first.structured_content is not None, first.content
        conversation_id = first.structured_content["conversation_id"]
        llm_endpoint.reply(openai_reply("It was 42."))
        async with Client(f"{other}/mcp", mode=mode) as client:
            second = await client.call_tool("agent", {"task": "What was it?", "conversation_id": conversation_id})
        assert not second.is_error, second.content
        assert second.structured_content["conversation_id"] == conversation_id
        said = [(m["role"], m.get("content")) for m in llm_endpoint.requests[-1].body["messages"]]
        assert said[-3:] == [("user", "Remember 42."), ("assistant", "Noted: 42."), ("user", "What was it?")]
    # on PostgreSQL, not a file the two happen to share
    assert pg_cluster.psql(database_url, f"select count(*) from conversations where id = '{conversation_id}'") == "1"


# -- the run index and meta-agent://runs/{run_id} -----------------------------------------------------------------------


async def test_a_run_is_read_back_by_its_id_done_with_its_result_or_its_error(tmp_path: Path, llm: FakeLLM) -> None:
    settings = Settings(model="openai:fake-model", conversations_db=tmp_path / "c.sqlite3", trace_dir=tmp_path)
    async with Client(build_server(settings, {}, openai_env(llm))) as client:
        llm.reply(openai_reply("Done."))
        answered = await client.call_tool("agent", {"task": "t"})
        assert answered.structured_content is not None
        run = await read_run(client, answered.structured_content["run_id"])
        assert run["status"] == "done" and run["mode"] == "agent" and run["error"] is None
        assert run["result"] == answered.structured_content

        llm.reply({"error": {"message": "no such model", "type": "invalid_request_error"}}, status=404)
        failed = await client.call_tool("agent", {"task": "t"})
        assert failed.is_error
        failures = [state for state in await all_runs(settings) if state["status"] == "done" and state["error"]]
        assert len(failures) == 1 and "no such model" in failures[0]["error"], failures

        with pytest.raises(MCPError, match="unknown run 'NOPE'"):
            await client.read_resource("meta-agent://runs/NOPE")


async def all_runs(settings: Settings) -> list[dict[str, Any]]:
    database = SqliteDatabase(settings.conversations_db)  # type: ignore[arg-type]
    ids = database.run(lambda sql: sql.all("select id from runs"))
    index = RunIndex(database, "reader")
    states = [await index.read(run_id) for (run_id,) in ids]
    database.close()
    return [state.to_json() for state in states if state is not None]


def test_a_replica_refuses_to_start_against_a_newer_schema_in_one_line(database_url: str, tmp_path: Path) -> None:
    database = PostgresDatabase(database_url)
    database.run(set_version, len(MIGRATIONS) + 1)
    database.close()
    config = tmp_path / "servers.json"
    config.write_text('{"mcpServers": {}}')
    done = subprocess.run(
        [sys.executable, "-m", "meta_agent", "serve", "--transport", "http", "--port", "0", "--config", str(config)],
        env={**os.environ, "META_AGENT_DATABASE_URL": database_url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        f"meta-agent: {loggable_url(database_url)}: the database's schema is version "
        f"{len(MIGRATIONS) + 1}, newer than this meta-agent knows ({len(MIGRATIONS)}): upgrade meta-agent, or give it "
        "another database\n"
    )


async def test_a_cancelled_run_is_done_saying_so(tmp_path: Path, llm: FakeLLM) -> None:
    settings = Settings(model="openai:fake-model", conversations_db=tmp_path / "c.sqlite3", trace_dir=tmp_path)
    servers = {"f": ServerEntry(command=sys.executable, args=[str(FAULT_SERVER)])}
    llm.reply(openai_reply(None, ("c1", "f__hang", {})))
    async with Client(build_server(settings, servers, openai_env(llm))) as client, anyio.create_task_group() as tg:
        tg.start_soon(client.call_tool, "agent", {"task": "wait forever"})
        with anyio.fail_after(30):
            while not await all_runs(settings) or len(llm.requests) < 1:
                await anyio.sleep(0.05)  # polling for the run to be under way, not waiting a fixed time
        tg.cancel_scope.cancel()  # the caller goes away
    with anyio.fail_after(30):
        while (run := (await all_runs(settings))[0])["status"] == "running":
            await anyio.sleep(0.05)
    assert run["status"] == "done" and run["error"] == "cancelled" and run["result"] is None


def finished_with(answer: str, image: str) -> RunResult:
    """A run's result with `answer` and one image whose base64 is `image`."""
    usage = RunUsage(model_calls=1, tool_calls=0, input_tokens=1, output_tokens=1)
    images = (ImagePart(data=image, mime_type="image/png"),)
    return RunResult(answer=answer, stop_reason="final", run_id="r1", steps=(), usage=usage, images=images)


async def test_a_replica_that_lost_a_run_cannot_end_it_under_the_replica_running_it_now(tmp_path: Path) -> None:
    """A replica that stalled past its run's mark while another took the run over (and resumed it): its late end of
    the run, a result or a failure, is not written over the run as the other runs it. A run given up is, whoever
    ran it."""
    database = SqliteDatabase(tmp_path / "runs.sqlite3")
    stalled, taker = RunIndex(database, "stalled"), RunIndex(database, "taker")
    stale, fresh = finished_with("stale", "c3RhbGU="), finished_with("fresh", "ZnJlc2g=")
    with pytest.raises(RuntimeError, match="late"):
        async with stalled.running("r1", "agent", "t"):
            async with taker.running("r1", "agent", "t"):  # took it over
                await stalled.finished("r1", stale)
                state = await taker.read("r1", images=True)
                assert state is not None and (state.status, state.replica, state.images) == ("running", "taker", ())
                await taker.finished("r1", fresh)
            raise RuntimeError("the stalled replica's run fails late")
    state = await taker.read("r1", images=True)
    assert state is not None and (state.status, state.result, state.error) == ("done", fresh.to_json(), None)
    assert state.images == fresh.images  # its result's images are the run's, not the stalled replica's
    async with taker.running("r2", "agent", "t"):
        await stalled.given_up("r2", "not resumed")
    state = await taker.read("r2")
    assert state is not None and (state.status, state.error) == ("done", "not resumed")
    database.close()
