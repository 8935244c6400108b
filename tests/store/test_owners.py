"""Owners in the store (migration 6): a conversation, its allowed tools and a run are their owner's, on a real SQLite
file; another owner is told what an unknown id gets, without waiting for the owner's turn; the rows of a database
made before owners become the local user's."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from meta_agent.core.messages import UserMessage
from meta_agent.errors import ConfigError
from meta_agent.store import database as database_module
from meta_agent.store.conversations import Conversations
from meta_agent.store.database import LOCAL_OWNER, MIGRATIONS, Sql, SqliteDatabase
from meta_agent.store.run_index import RunIndex

pytestmark = [pytest.mark.anyio, pytest.mark.quick]

ALICE, BOB = "sub:" + "a" * 32, "sub:" + "b" * 32
HANG = 30.0  # a bound on what must not wait at all (it would wait for a hold that is never let go)


async def started(conversations: Conversations, owner: str) -> str:
    """A new conversation of `owner` with one turn saved: its id."""
    async with conversations.turn(None, owner=owner) as turn:
        await conversations.save(turn, [UserMessage.of("hello")])
    return turn.conversation_id


async def test_another_owners_conversation_is_unknown_and_not_waited_for(tmp_path: Path) -> None:
    """Bob continuing Alice's conversation, even while her turn holds it, is refused at once with exactly the error
    of an id nobody has; Alice's own turn, and her allowed tools, are hers only."""
    conversations = Conversations(SqliteDatabase(tmp_path / "c.sqlite3"))
    conversation = await started(conversations, ALICE)
    await conversations.allow(conversation, {"f.delete_file"}, owner=ALICE)
    async with conversations.turn(conversation, owner=ALICE) as held:  # held by Alice's turn meanwhile
        assert held.history == (UserMessage.of("hello"),)
        errors = []
        for named in (conversation, "01NOSUCHCONVERSATION000000"):
            with anyio.fail_after(HANG), pytest.raises(ConfigError) as refused:
                async with conversations.turn(named, owner=BOB):
                    pass
            errors.append(str(refused.value).replace(named, "ID"))
        assert errors[0] == errors[1] == "conversation_id: unknown conversation 'ID'"
        with pytest.raises(ConfigError) as loaded:
            await conversations.load(conversation, owner=BOB)
        assert str(loaded.value) == f"conversation_id: unknown conversation {conversation!r}"
    assert await conversations.allowed(conversation, owner=ALICE) == {"f.delete_file"}
    assert await conversations.allowed(conversation, owner=BOB) == set()
    await conversations.allow(conversation, {"f.other"}, owner=BOB)  # a grant of Bob's under her id...
    assert await conversations.allowed(conversation, owner=ALICE) == {"f.delete_file"}  # ...is not hers
    conversations.close()


async def test_a_new_conversation_saved_under_a_taken_id_does_not_overwrite_another_owners(tmp_path: Path) -> None:
    """A new conversation's save under an id another owner's conversation has (a resumed run saves its new one
    again, so a save may meet its own row) leaves that conversation as it was."""
    conversations = Conversations(SqliteDatabase(tmp_path / "c.sqlite3"))
    conversation = await started(conversations, ALICE)
    async with conversations.turn(None, new_id=conversation, owner=BOB) as turn:
        await conversations.save(turn, [UserMessage.of("overwritten?")])
    assert await conversations.load(conversation, owner=ALICE) == (UserMessage.of("hello"),)
    conversations.close()


async def test_a_run_is_read_and_listed_for_its_owner_only_and_keeps_its_owner_when_resumed(tmp_path: Path) -> None:
    database = SqliteDatabase(tmp_path / "c.sqlite3")
    one, other = RunIndex(database, "one"), RunIndex(database, "other")
    async with one.running("01RUNOFALICE0000000000000A", "agent", "hers", owner=ALICE):
        pass
    async with one.running("01RUNOFBOB000000000000000B", "agent", "his", owner=BOB):
        pass
    # resumed on another replica, whoever the resuming code names: the row stays Alice's
    async with other.running("01RUNOFALICE0000000000000A", "agent", "hers", owner=LOCAL_OWNER):
        pass
    assert await one.read("01RUNOFALICE0000000000000A", owner=BOB) is None
    state = await one.read("01RUNOFALICE0000000000000A", owner=ALICE)
    assert state is not None and state.owner == ALICE and state.replica == "other"
    assert [s.run_id for s in await one.recent(owner=ALICE)] == ["01RUNOFALICE0000000000000A"]
    assert [s.run_id for s in await one.recent(owner=BOB)] == ["01RUNOFBOB000000000000000B"]
    assert await one.recent(owner=LOCAL_OWNER) == []
    assert {s.owner for s in await one.recent(owner=None)} == {ALICE, BOB}
    database.close()


def test_rows_made_before_owners_become_the_local_users(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A database at version 5 with a conversation, its allowed tool and a run: migration 6 makes them the local
    user's (what stdio and `meta-agent run` callers are), nobody else's."""
    path = tmp_path / "c.sqlite3"
    monkeypatch.setattr(database_module, "MIGRATIONS", MIGRATIONS[:5])
    old = SqliteDatabase(path)

    def rows(sql: Sql) -> None:
        sql.execute("insert into conversations (id, messages, updated) values ('C', '[]', '2026-01-01 00:00:00')")
        sql.execute("insert into conversation_allowances (conversation_id, tool) values ('C', 'f.t')")
        sql.execute(
            "insert into runs (id, status, mode, replica, started, updated) values"
            " ('R', 'done', 'ask', 'r', '2026-01-01 00:00:00', '2026-01-01 00:00:00')"
        )

    old.run(rows)
    old.close()
    monkeypatch.undo()
    new = SqliteDatabase(path)
    owners = new.run(
        lambda sql: (
            [
                sql.one(f"select owner from {table}")
                for table in ("conversations", "conversation_allowances", "runs", "meta_agent_schema")
                if table != "meta_agent_schema"
            ]
            + [sql.one("select version from meta_agent_schema")]
        )
    )
    assert owners == [(LOCAL_OWNER,), (LOCAL_OWNER,), (LOCAL_OWNER,), (len(MIGRATIONS),)]
    new.close()
