"""The fault suite's state groups: conversations continued by many calls at once, and the trust file and conversation
records corrupted while the server runs (tests/faults/test_faults.py describes the suite; the harness is
tests/fixtures/fault_harness.py).

concurrent_state: seeded bursts of calls continuing the same conversations at once, through two servers sharing one
database (as two processes would). Each turn is checked: it answered, it is in the stored transcript exactly once
with its answer, and the model saw every turn stored before it (the turns were serialised, none was lost).

corrupted_state: the trust file and stored conversation records are broken in seeded ways under a running server.
Each ends fail-closed (no recorded level raises a tool's trust while the file cannot be read; the toolbox says why)
or as a one-line error naming the conversation, never as a crash; a repaired file applies again.
"""

from __future__ import annotations

import json
import random
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import fault_entry, openai_env
from fake_llm import FakeLLM, openai_reply
from fault_harness import (  # noqa: F401  (this module's fixtures)
    MODEL,
    WAIT,
    answer_with,
    call,
    calls_of,
    clean_error,
    finished,
    group,
    injecting,
    log_to_a_list,
    serving,
    text_of,
)
from fault_tally import TALLY
from mcp import Client

from meta_agent.config.settings import Settings
from meta_agent.engine import Engine
from meta_agent.front.server import build_server
from meta_agent.store import trustfile
from meta_agent.toolbox.build import definition_of

pytestmark = pytest.mark.anyio

GROUPS = {"concurrent_continuations", "corrupted_trust_file", "corrupted_conversations"}
TALLY.expected_groups |= GROUPS


# -- many calls continuing the same conversations at once ---------------------------------------------------------------

CONVERSATIONS = 4
BURSTS = 3
TURNS_PER_BURST = (2, 4)  # calls continuing one conversation at once, at least and at most


def user_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "user"]


def sent_for(llm: FakeLLM, task: str) -> list[dict[str, Any]]:
    """The messages of the model request whose newest message is `task`."""
    return next(seen.body["messages"] for seen in llm.requests if seen.body["messages"][-1].get("content") == task)


async def test_concurrent_continuations(llm: FakeLLM, tmp_path: Path) -> None:
    rng = random.Random(909)
    db = tmp_path / "conversations.sqlite3"
    async with (
        group("concurrent_continuations", "concurrent_state"),
        serving(llm, {}, conversations_db=db) as (first, _),
        serving(llm, {}, conversations_db=db) as (second, _),
    ):
        clients = [first, second]
        conversations: list[str] = []
        for c in range(CONVERSATIONS):
            llm.reply(openai_reply("started"), match=f"<start {c}>")
            started = finished(await call(first, "agent", {"task": f"<start {c}>"}))
            conversations.append(started["conversation_id"])
        for burst in range(BURSTS):
            turns = [
                (conversation, f"<turn {c}.{burst}.{k}>", rng.choice(clients))
                for c, conversation in enumerate(conversations)
                for k in range(rng.randint(*TURNS_PER_BURST))
            ]
            async with injecting("concurrent_state", len(turns)) as faults:
                answers = await _all_at_once(llm, turns)
                for conversation in conversations:
                    stored = [m for m in json.loads(_stored(db, conversation)) if m["role"] in ("user", "assistant")]
                    tasks = [m["parts"][0]["text"] for m in stored if m["role"] == "user"]
                    for task in (task for c, task, _ in turns if c == conversation):
                        assert tasks.count(task) == 1, (task, tasks)
                        at = next(
                            i for i, m in enumerate(stored) if m["role"] == "user" and m["parts"][0]["text"] == task
                        )
                        assert stored[at + 1]["text"] == answers[task]
                        assert user_texts(sent_for(llm, task)) == tasks[: tasks.index(task) + 1]  # saw all before it
                        faults.handled()


async def _all_at_once(llm: FakeLLM, turns: list[tuple[str, str, Client]]) -> dict[str, str]:
    answers: dict[str, str] = {}

    async def turn(conversation: str, task: str, client: Client) -> None:
        result = finished(await call(client, "agent", {"task": task, "conversation_id": conversation}))
        assert result["conversation_id"] == conversation
        answers[task] = result["answer"]

    for _, task, _ in turns:
        llm.reply(openai_reply(f"answered {task}"), match=task)
    async with anyio.create_task_group() as tg:
        for arguments in turns:
            tg.start_soon(turn, *arguments)
    assert answers == {task: f"answered {task}" for _, task, _ in turns}
    return answers


def _stored(db: Path, conversation: str) -> str:
    with closing(sqlite3.connect(db)) as connection:
        return connection.execute("select messages from conversations where id = ?", (conversation,)).fetchone()[0]


# -- the trust file broken while the server runs ------------------------------------------------------------------------

TRUST_INJECTIONS = 14


def _trust_corruptions(rng: random.Random) -> dict[str, Callable[[Path, str], None]]:
    """Ways to break a trust file whose good text is given; each writes the broken file (or a directory) in its place."""

    def text(broken: Callable[[str], str]) -> Callable[[Path, str], None]:
        return lambda path, good: path.write_text(broken(good))

    def without_definition(good: str) -> str:
        body = json.loads(good)
        for entry in body["tools"].values():
            entry.pop("definition")
        return json.dumps(body)

    def directory(path: Path, _good: str) -> None:
        path.unlink()
        path.mkdir()

    return {
        "stray_comma": text(lambda good: good.replace('"level": "always",', '"level": "always",,')),
        "truncated": text(lambda good: good[: rng.randint(1, len(good) - 2)]),
        "empty": text(lambda _good: ""),
        "not_an_object": text(lambda _good: "[]"),
        "tools_not_a_map": text(lambda _good: '{"tools": []}'),
        "unknown_level": text(lambda good: good.replace('"always"', '"sometimes"')),
        "no_definition": text(without_definition),
        "byte_order_mark": text(lambda good: "\ufeff" + good),
        "nul_byte": text(lambda good: good.replace("{", "{\x00", 1)),
        "nested_too_deep": text(lambda _good: "[" * 100_000),
        "binary": lambda path, _good: path.write_bytes(bytes(rng.randrange(128, 256) for _ in range(64))),
        "directory": directory,
    }


@asynccontextmanager
async def serving_with_trust(llm: FakeLLM, path: Path) -> AsyncIterator[tuple[Client, Engine]]:
    """Our server with child f and a trust file, on 2026-07-28 with no elicitation: an ask-level call is refused."""
    server = build_server(Settings(model=MODEL), {"f": fault_entry()}, openai_env(llm), trust_file=path)
    async with Client(server) as client:
        engine = server.engine
        assert engine is not None
        with anyio.fail_after(WAIT):
            await engine.pool.wait_settled()
        yield client, engine


async def test_trust_file_corrupted_while_serving(llm: FakeLLM, tmp_path: Path) -> None:
    """f.delete_file recorded `always`, f.echo recorded `never`. Broken: delete is refused (ask level, nobody to
    ask), echo stays blocked, the toolbox names the problem in one line. Repaired: delete runs again unasked."""
    rng = random.Random(1010)
    path = tmp_path / "servers.trust.json"
    corruptions = _trust_corruptions(rng)
    kinds = list(corruptions) + rng.choices(sorted(corruptions), k=TRUST_INJECTIONS - len(corruptions))
    rng.shuffle(kinds)
    async with group("corrupted_trust_file", "corrupted_state"), serving_with_trust(llm, path) as (client, engine):
        box = engine.toolbox()
        levels = {"f.delete_file": "always", "f.echo": "never"}
        recorded = {
            name: trustfile.Recorded(level=level, definition=definition_of(box.by_name[name]), recorded="then")  # type: ignore[arg-type]
            for name, level in levels.items()
        }
        trustfile.save(path, recorded)
        good = path.read_text()
        assert {name: engine.toolbox().by_name[name].trust for name in levels} == levels  # read while it was good
        for i, kind in enumerate(kinds):
            async with injecting("corrupted_state") as faults:
                corruptions[kind](path, good)
                refused = await _delete_and_echo(llm, client, f"[trust-{i}]")
                assert [record["ok"] for record in refused] == [False, False], (kind, refused)
                assert "cannot be asked" in refused[0]["error"] and "is blocked" in refused[1]["error"], refused
                problem = (await _toolbox(client))["problems"][0]
                assert problem.startswith(f"{path}:") and "\n" not in problem, problem  # path:LINE:COLUMN: for JSON
                if path.is_dir():
                    path.rmdir()
                trustfile.save(path, recorded)
                ran = await _delete_and_echo(llm, client, f"[trust-{i}-repaired]")
                assert [record["ok"] for record in ran] == [True, False], (kind, ran)
                faults.handled()


async def _delete_and_echo(llm: FakeLLM, client: Client, tag: str) -> list[dict[str, Any]]:
    answer_with(llm, tag, ("c1", "f__delete_file", {"path": "/x"}), ("c2", "f__echo", {"text": "hi"}))
    return calls_of(finished(await call(client, "agent", {"task": tag})))


async def _toolbox(client: Client) -> dict[str, Any]:
    with anyio.fail_after(WAIT):
        return json.loads((await client.read_resource("meta-agent://toolbox")).contents[0].text)  # type: ignore[union-attr]


# -- stored conversations broken while the server runs ------------------------------------------------------------------

CONVERSATION_INJECTIONS = 18
UNREADABLE = "conversation_id: conversation '{id}' is stored in a form this version cannot read ("
# An older version's ask: two calls made, one answered.
HALF_ANSWERED = [
    {"role": "user", "parts": [{"kind": "text", "text": "draw two"}]},
    {
        "role": "assistant",
        "text": "",
        "tool_calls": [
            {"id": "c1", "name": "image_gen", "arguments": {}},
            {"id": "c2", "name": "image_gen", "arguments": {}},
        ],
    },
    {"role": "tool", "results": [{"call_id": "c1", "name": "image_gen", "parts": [{"kind": "text", "text": "one"}]}]},
]


def _edited(edit: Callable[[list[dict[str, Any]]], Any]) -> Callable[[str], Any]:
    def change(stored: str) -> str:
        messages = json.loads(stored)
        edit(messages)
        return json.dumps(messages)

    return change


def _record_corruptions(rng: random.Random) -> dict[str, tuple[str, Callable[[str], Any]]]:
    """Ways to break a stored record: (what continuing it gives: "unreadable", "unknown" or "continues", the new value
    of its `messages` column given the old, or None to delete the row)."""
    return {
        "truncated": ("unreadable", lambda stored: stored[: rng.randint(1, len(stored) - 2)]),
        "unknown_role": ("unreadable", lambda stored: stored.replace('"role": "assistant"', '"role": "robot"')),
        "missing_field": ("unreadable", _edited(lambda messages: messages[0].pop("parts"))),
        "wrong_type": ("unreadable", _edited(lambda messages: messages[0].update(parts="text"))),
        "not_a_list": ("unreadable", lambda _stored: '{"messages": []}'),
        "null": ("unreadable", lambda _stored: "null"),
        "blob": ("unreadable", lambda _stored: b"\xff\xfe\x00garbage"),
        "integer": ("unreadable", lambda _stored: 42),
        "nested_too_deep": ("unreadable", lambda _stored: "[" * 100_000),
        "deleted": ("unknown", lambda _stored: None),
        "half_answered": ("continues", lambda _stored: json.dumps(HALF_ANSWERED)),
    }


# Holds on a conversation left by a process that died (ended) or by a clock that jumped (far ahead): both are taken.
LEFT_HOLDS = {"stale_hold": -5.0, "hold_far_ahead": 1e9}


async def test_conversation_records_corrupted_while_serving(llm: FakeLLM, tmp_path: Path) -> None:
    rng = random.Random(1111)
    db = tmp_path / "conversations.sqlite3"
    corruptions = _record_corruptions(rng)
    kinds = list(corruptions) + list(LEFT_HOLDS)
    kinds += rng.choices(sorted(kinds), k=CONVERSATION_INJECTIONS - len(kinds))
    rng.shuffle(kinds)
    async with (
        group("corrupted_conversations", "corrupted_state"),
        serving(llm, {}, conversations_db=db) as (client, _),
    ):
        for i, kind in enumerate(kinds):
            tag = f"[record-{i}]"
            llm.reply(openai_reply("first"), match=f"{tag} first")
            conversation = finished(await call(client, "agent", {"task": f"{tag} first"}))["conversation_id"]
            async with injecting("corrupted_state") as faults:
                expected = _corrupt(db, conversation, kind, corruptions)
                llm.reply(openai_reply("went on"), match=f"{tag} next")
                result = await call(client, "agent", {"task": f"{tag} next", "conversation_id": conversation})
                if expected == "unreadable":
                    assert clean_error(result).startswith(UNREADABLE.format(id=conversation)), (kind, text_of(result))
                elif expected == "unknown":
                    assert clean_error(result) == f"conversation_id: unknown conversation '{conversation}'"
                else:
                    assert finished(result)["answer"] == "went on", kind
                    sent = next(seen.body for seen in reversed(llm.requests) if f"{tag} next" in json.dumps(seen.body))
                    _every_call_answered(sent["messages"])
                faults.handled()


def _corrupt(db: Path, conversation: str, kind: str, corruptions: dict[str, tuple[str, Callable[[str], Any]]]) -> str:
    """Break the stored record of `conversation` in the way `kind` names; returns what continuing it must give."""
    with closing(sqlite3.connect(db)) as connection, connection:
        if kind in LEFT_HOLDS:
            connection.execute(
                "update conversations set holder = 'a-process-long-gone', held_until = ? where id = ?",
                (time.time() + LEFT_HOLDS[kind], conversation),
            )
            return "continues"
        expected, change = corruptions[kind]
        (stored,) = connection.execute("select messages from conversations where id = ?", (conversation,)).fetchone()
        value = change(stored)
        if value is None:
            connection.execute("delete from conversations where id = ?", (conversation,))
        else:
            connection.execute("update conversations set messages = ? where id = ?", (value, conversation))
    return expected


def _every_call_answered(messages: list[dict[str, Any]]) -> None:
    for i, message in enumerate(messages):
        for tool_call in message.get("tool_calls") or ():
            after = messages[i + 1 : i + 1 + len(message["tool_calls"])]
            assert tool_call["id"] in {m.get("tool_call_id") for m in after}, messages
