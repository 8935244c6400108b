"""Conversations that continue, across calls and across a server restart, stored in a real SQLite file."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import anyio
import pytest
import structlog
from conftest import fault_entry, openai_env
from fake_llm import FakeLLM, openai_reply
from mcp import Client

from meta_agent.config.settings import Settings
from meta_agent.core.messages import (
    AssistantMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCall,
    ToolMessage,
    ToolResult,
    UserMessage,
)
from meta_agent.errors import ConversationLost
from meta_agent.front.server import build_server
from meta_agent.front.tool_results import NOT_REMEMBERED
from meta_agent.providers.scripted import ScriptedProvider
from meta_agent.records import transcripts
from meta_agent.records.transcripts import trim
from meta_agent.store.conversations import Conversations, default_path
from meta_agent.store.database import SqliteDatabase

pytestmark = [pytest.mark.anyio, pytest.mark.quick]


def said(llm: FakeLLM, request: int = -1) -> list[tuple[str, str]]:
    """(role, text) of what the model was sent, system prompt left out."""
    out = []
    for m in llm.requests[request].body["messages"][1:]:
        content = m.get("content") or ""
        out.append((m["role"], content if isinstance(content, str) else str(content)))
    return out


@pytest.mark.processes
async def test_a_conversation_continues_and_survives_a_restart(tmp_path: Path, llm: FakeLLM) -> None:
    settings = Settings(model="openai:fake-model", conversations_db=tmp_path / "c.sqlite3")
    servers = {"f": fault_entry()}
    llm.reply(openai_reply(None, ("c1", "f__echo", {"text": "42"})))
    llm.reply(openai_reply("The number is 42."))
    async with Client(build_server(settings, servers, openai_env(llm))) as client:
        first = await client.call_tool("agent", {"task": "Remember the number 42."})
    conversation = first.structured_content["conversation_id"]  # type: ignore[index]
    assert conversation and len(conversation) == 26

    # a new server process would build a new server object: same database, nothing else shared
    llm.reply(openai_reply("You told me 42."))
    async with Client(build_server(settings, servers, openai_env(llm)), mode="legacy") as client:
        second = await client.call_tool("agent", {"task": "What was the number?", "conversation_id": conversation})
    assert second.content[0].text == "You told me 42."  # type: ignore[union-attr]
    assert second.structured_content["conversation_id"] == conversation  # type: ignore[index]
    assert said(llm) == [
        ("user", "Remember the number 42."),
        ("assistant", ""),
        ("tool", "42"),
        ("assistant", "The number is 42."),
        ("user", "What was the number?"),
    ]


async def test_an_unknown_conversation_is_a_clear_error(tmp_path: Path, llm: FakeLLM) -> None:
    settings = Settings(model="openai:fake-model", conversations_db=tmp_path / "c.sqlite3")
    async with Client(build_server(settings, {}, openai_env(llm))) as client:
        result = await client.call_tool("agent", {"task": "t", "conversation_id": "01NOSUCHCONVERSATION000000"})
    assert result.is_error
    assert result.content[0].text == "conversation_id: unknown conversation '01NOSUCHCONVERSATION000000'"  # type: ignore[union-attr]


async def test_a_store_that_cannot_be_written_costs_the_conversation_not_the_answer(
    tmp_path: Path, llm: FakeLLM
) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    settings = Settings(model="openai:fake-model", conversations_db=tmp_path / "a-file" / "c.sqlite3")
    llm.reply(openai_reply("The answer."))
    with structlog.testing.capture_logs() as logs:
        async with Client(build_server(settings, {}, openai_env(llm))) as client:
            result = await client.call_tool("agent", {"task": "t"})
    assert not result.is_error
    assert result.structured_content is not None and result.structured_content["conversation_id"] is None
    error = result.structured_content["conversation_error"]
    assert error.startswith(f"{settings.conversations_db}: cannot write the conversations store: [Errno ")
    assert error.endswith("; this turn was not saved") and "\n" not in error
    assert [block.text for block in result.content] == ["The answer.", NOT_REMEMBERED + error]  # type: ignore[union-attr]
    assert [e["path"] for e in logs if e["event"] == "conversation_not_saved"] == [str(settings.conversations_db)]


async def test_a_turn_whose_conversation_another_process_took_over_says_it_is_not_saved(tmp_path: Path) -> None:
    """The answer stands, and the caller is told the turn is in no conversation (the model's second turn lets another
    process take the conversation over, as one does once a turn's hold has lapsed)."""
    path = tmp_path / "c.sqlite3"
    provider = ScriptedProvider([ModelResponse(text="first answer")])

    def taking_over(conversation_id: str) -> Callable[[ModelRequest], Awaitable[ModelResponse]]:
        async def answer(_request: ModelRequest) -> ModelResponse:
            with closing(sqlite3.connect(path)) as db, db:
                db.execute("update conversations set holder = 'another' where id = ?", (conversation_id,))
            return ModelResponse(text="second answer")

        return answer

    settings = Settings(conversations_db=path, trace_dir=tmp_path / "traces")
    async with Client(build_server(settings, {}, {}, provider=provider)) as client:
        first = await client.call_tool("agent", {"task": "one"})
        assert first.structured_content is not None and "conversation_error" not in first.structured_content
        conversation = first.structured_content["conversation_id"]
        provider.add(taking_over(conversation))
        second = await client.call_tool("agent", {"task": "two", "conversation_id": conversation})
    assert not second.is_error and second.structured_content is not None
    assert second.structured_content["conversation_id"] is None
    error = second.structured_content["conversation_error"]
    assert error.startswith(f"conversation {conversation!r}: another process took it over while this turn ran")
    assert [block.text for block in second.content] == ["second answer", NOT_REMEMBERED + error]  # type: ignore[union-attr]


def turn(n: int, size: int) -> list:
    call = ToolCall(id=f"c{n}", name="f__echo", arguments={"text": "x"})
    return [
        UserMessage.of(f"turn {n}"),
        AssistantMessage(tool_calls=(call,)),
        ToolMessage(results=(ToolResult(call_id=f"c{n}", name="f__echo", parts=(TextPart(text="y" * size),)),)),
        AssistantMessage(text=f"answer {n}"),
    ]


@pytest.mark.skipif(sys.platform != "linux", reason="the XDG layout is Linux's; platformdirs knows the others")
@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"XDG_DATA_HOME": "/data", "HOME": "/home/u"}, "/data/meta-agent/conversations.sqlite3"),
        ({"XDG_DATA_HOME": "", "HOME": "/home/u"}, "/home/u/.local/share/meta-agent/conversations.sqlite3"),
        ({"HOME": "/home/u"}, "/home/u/.local/share/meta-agent/conversations.sqlite3"),
    ],
)
def test_the_store_is_in_the_user_data_dir(monkeypatch: pytest.MonkeyPatch, environ: dict, expected: str) -> None:
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert default_path() == Path(expected)


def test_trimming_drops_whole_old_turns_and_keeps_the_newest() -> None:
    transcript = tuple(turn(1, 500) + turn(2, 500) + turn(3, 500))
    kept, dropped = trim(transcript, max_chars=2500)
    assert dropped == 1
    assert kept[0] == UserMessage.of("turn 2")  # never a tool result without its call
    assert kept[-1] == AssistantMessage(text="answer 3")
    one_huge = tuple(turn(1, 10_000))
    assert trim(one_huge, max_chars=100) == (one_huge, 0)  # the newest turn stays, whatever its size


async def test_a_trimmed_conversation_says_so(tmp_path: Path) -> None:
    store = Conversations(SqliteDatabase(tmp_path / "c.sqlite3"))
    async with store.turn(None) as new:
        dropped = await store.save(new, tuple(turn(1, 300_000) + turn(2, 300_000)))
    assert dropped == 1
    assert (await store.load(new.conversation_id))[0] == UserMessage.of("turn 2")


async def test_any_text_a_model_sends_is_saved_as_it_is(tmp_path: Path) -> None:
    """A lone surrogate (a model's "\\ud800") is no UTF-8: stored raw, SQLite would refuse the whole turn."""
    store = Conversations(SqliteDatabase(tmp_path / "c.sqlite3"))
    transcript = (UserMessage.of("say \ud800 and é"), AssistantMessage(text="\udfff 日本 \U0001f600"))
    try:
        async with store.turn(None) as new:
            await store.save(new, transcript)
        assert await store.load(new.conversation_id) == transcript
    finally:
        store.close()


# -- every tool call answered ------------------------------------------------------------------------------------------

TWO_CALLS = AssistantMessage(
    tool_calls=(ToolCall(id="c1", name="f__echo", arguments={}), ToolCall(id="c2", name="f__echo", arguments={}))
)


def answer(call_id: str, text: str = "ok") -> ToolResult:
    return ToolResult(call_id=call_id, name="f__echo", parts=(TextPart(text=text),))


def not_run(call_id: str) -> ToolResult:
    return ToolResult(call_id=call_id, name="f__echo", parts=(TextPart(text=transcripts.NOT_RUN),), is_error=True)


@pytest.mark.parametrize(
    ("transcript", "expected"),
    [
        pytest.param(
            [TWO_CALLS, ToolMessage(results=(answer("c1"),))],
            [TWO_CALLS, ToolMessage(results=(answer("c1"), not_run("c2")))],
            id="a-result-missing",
        ),
        pytest.param(
            [UserMessage.of("go"), TWO_CALLS],
            [UserMessage.of("go"), TWO_CALLS, ToolMessage(results=(not_run("c1"), not_run("c2")))],
            id="cut-before-the-results",
        ),
        pytest.param(
            [TWO_CALLS, ToolMessage(results=(answer("c2", "b"), answer("c9"), answer("c1", "a")))],
            [TWO_CALLS, ToolMessage(results=(answer("c1", "a"), answer("c2", "b")))],
            id="out-of-order-and-a-stray",
        ),
        pytest.param(
            [UserMessage.of("hi"), ToolMessage(results=(answer("c1"),)), AssistantMessage(text="x")],
            [UserMessage.of("hi"), AssistantMessage(text="x")],
            id="answering-no-call",
        ),
    ],
)
def test_every_tool_call_is_answered_once_right_after_it(transcript: list, expected: list) -> None:
    assert transcripts.answered(transcript) == tuple(expected)
    assert transcripts.answered(expected) == tuple(expected)  # a valid transcript is kept as it is


async def test_a_transcript_cut_mid_step_is_saved_with_every_call_answered(tmp_path: Path) -> None:
    """What a run cut between a model turn and its tool results holds: saved, it is one the providers accept."""
    store = Conversations(SqliteDatabase(tmp_path / "c.sqlite3"))
    async with store.turn(None) as new:
        await store.save(new, (UserMessage.of("go"), TWO_CALLS))
    assert await store.load(new.conversation_id) == (
        UserMessage.of("go"),
        TWO_CALLS,
        ToolMessage(results=(not_run("c1"), not_run("c2"))),
    )


# -- records of older versions, and records that cannot be read --------------------------------------------------------

OLD_SCHEMA = (
    "create table conversations (id text primary key, messages text not null, "
    "updated text not null default (datetime('now')))"
)
# As an older version wrote it: no thinking, no invalid_arguments, no is_error.
OLD_RECORD = [
    {"role": "user", "parts": [{"kind": "text", "text": "Remember 42."}]},
    {"role": "assistant", "text": "", "tool_calls": [{"id": "c1", "name": "f__echo", "arguments": {"text": "42"}}]},
    {"role": "tool", "results": [{"call_id": "c1", "name": "f__echo", "parts": [{"kind": "text", "text": "42"}]}]},
    {"role": "assistant", "text": "42 it is."},
]


def old_store(path: Path, records: dict[str, str]) -> None:
    db = sqlite3.connect(path)
    with db:
        db.execute(OLD_SCHEMA)
        db.executemany("insert into conversations (id, messages) values (?, ?)", records.items())
    db.close()


async def test_a_record_of_an_older_version_still_loads(tmp_path: Path, llm: FakeLLM) -> None:
    path = tmp_path / "c.sqlite3"
    old_store(path, {"OLD": json.dumps(OLD_RECORD)})
    settings = Settings(model="openai:fake-model", conversations_db=path)
    llm.reply(openai_reply("Still 42."))
    async with Client(build_server(settings, {}, openai_env(llm))) as client:
        result = await client.call_tool("agent", {"task": "What was it?", "conversation_id": "OLD"})
    assert not result.is_error, result.content
    assert said(llm) == [
        ("user", "Remember 42."),
        ("assistant", ""),
        ("tool", "42"),
        ("assistant", "42 it is."),
        ("user", "What was it?"),
    ]


@pytest.mark.parametrize(
    ("stored", "problem"),
    [
        ('[{"role": "user", ', "not JSON: "),
        ('[{"role": "robot", "text": "beep"}]', "[0]: input tag 'robot' found using 'role'"),
        ('[{"role": "user"}]', "[0].user.parts: required key is missing"),
        ('[{"role": "assistant", "text": 42}]', "[0].assistant.text: expected a string, got 42"),
        ('{"messages": []}', '(top level): expected a list, got {"messages": []}'),
        ("null", "(top level): expected a list, got null"),
        ("[" * 100_000, "not JSON: maximum recursion depth exceeded"),
    ],
    ids=["truncated", "unknown-role", "missing-field", "wrong-type", "not-a-list", "null", "nested-too-deep"],
)
async def test_a_record_that_cannot_be_decoded_is_one_line_naming_the_conversation(
    tmp_path: Path, llm: FakeLLM, stored: str, problem: str
) -> None:
    path = tmp_path / "c.sqlite3"
    old_store(path, {"BROKEN": stored})
    settings = Settings(model="openai:fake-model", conversations_db=path)
    async with Client(build_server(settings, {}, openai_env(llm))) as client:
        result = await client.call_tool("agent", {"task": "t", "conversation_id": "BROKEN"})
        with anyio.fail_after(10):  # the failed turn let the conversation go: the next one is not kept waiting
            again = await client.call_tool("agent", {"task": "t", "conversation_id": "BROKEN"})
    text = result.content[0].text  # type: ignore[union-attr]
    assert result.is_error and "\n" not in text
    prefix = "conversation_id: conversation 'BROKEN' is stored in a form this version cannot read ("
    assert text.startswith(prefix + problem), text
    assert again.content == result.content


async def test_a_store_that_is_not_a_database_is_one_line(tmp_path: Path, llm: FakeLLM) -> None:
    path = tmp_path / "c.sqlite3"
    path.write_bytes(b"not a database at all " * 100)
    settings = Settings(model="openai:fake-model", conversations_db=path)
    llm.reply(openai_reply("An answer all the same."))
    async with Client(build_server(settings, {}, openai_env(llm))) as client:
        continued = await client.call_tool("agent", {"task": "t", "conversation_id": "ANY"})
        new = await client.call_tool("agent", {"task": "t"})
    text = continued.content[0].text  # type: ignore[union-attr]
    assert continued.is_error and text == f"{path}: cannot read the conversations store: file is not a database"
    assert new.content[0].text == "An answer all the same."  # type: ignore[union-attr]
    assert new.structured_content["conversation_id"] is None  # type: ignore[index]


# -- turns held across processes ---------------------------------------------------------------------------------------

# Another process taking a conversation for a turn: it says "held", saves a turn when a line comes on its stdin.
HOLDER = """
import sys
from pathlib import Path

import anyio

from meta_agent.store.conversations import Conversations
from meta_agent.store.database import SqliteDatabase
from meta_agent.core.messages import AssistantMessage, UserMessage


async def main(path: str, conversation_id: str, lease: str) -> None:
    store = Conversations(SqliteDatabase(Path(path)), lease_seconds=float(lease))
    async with store.turn(conversation_id) as turn:
        print("held", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        await store.save(turn, (*turn.history, UserMessage.of("from the other process"), AssistantMessage(text="ok")))


anyio.run(main, *sys.argv[1:])
"""
HOLDER_LEASE = 1.0  # seconds: short, so a killed holder frees the conversation soon


@contextmanager
def holder(path: Path, conversation_id: str) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path), conversation_id, str(HOLDER_LEASE)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)
        for pipe in (proc.stdin, proc.stdout):
            assert pipe is not None
            pipe.close()


def held_until(path: Path, conversation_id: str) -> float:
    with closing(sqlite3.connect(path)) as db:
        return db.execute("select held_until from conversations where id = ?", (conversation_id,)).fetchone()[0]


async def holding(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    line = await anyio.to_thread.run_sync(proc.stdout.readline, abandon_on_cancel=True)
    assert line == "held\n", line


@pytest.mark.processes
async def test_a_turn_waits_while_another_process_holds_the_conversation(tmp_path: Path) -> None:
    """A turn that another process holds is waited for, and the next turn starts from what it saved; a holder that is
    killed frees the conversation once its lease runs out."""
    path = tmp_path / "c.sqlite3"
    store = Conversations(SqliteDatabase(path))
    async with store.turn(None) as new:
        await store.save(new, (UserMessage.of("first"), AssistantMessage(text="one")))
    conversation = new.conversation_id
    seen: list[tuple] = []

    async def next_turn() -> None:
        async with store.turn(conversation) as turn:
            seen.append(turn.history)

    with holder(path, conversation) as other, structlog.testing.capture_logs() as logs, anyio.fail_after(30):
        await holding(other)
        async with anyio.create_task_group() as tg:
            tg.start_soon(next_turn)
            while not seen and not any(event["event"] == "conversation_waiting" for event in logs):
                await anyio.sleep(0.01)
            assert not seen  # waiting for the other process, not beside it
            first_end = held_until(path, conversation)
            while time.time() <= first_end or held_until(path, conversation) <= first_end:
                await anyio.sleep(0.01)  # until the other process's first lease has run out, and it renewed it
            assert not seen  # still held
            assert other.stdin is not None
            other.stdin.write("go\n")
            other.stdin.flush()
        assert other.wait(timeout=10) == 0
    assert [m.parts[0].text for m in seen[0] if isinstance(m, UserMessage)] == ["first", "from the other process"]

    with holder(path, conversation) as killed, anyio.fail_after(30):
        await holding(killed)
        killed.kill()
        await next_turn()  # waits at most the holder's lease
    assert len(seen[1]) == 4


async def test_a_turn_whose_hold_another_process_took_over_is_not_saved(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    store = Conversations(SqliteDatabase(path))
    async with store.turn(None) as new:
        await store.save(new, (UserMessage.of("first"), AssistantMessage(text="one")))
    async with store.turn(new.conversation_id) as turn:
        with closing(sqlite3.connect(path)) as db, db:  # as a process would once this turn's lease had run out
            db.execute("update conversations set holder = 'another' where id = ?", (new.conversation_id,))
        with pytest.raises(ConversationLost, match="another process took it over while this turn ran"):
            await store.save(turn, (*turn.history, UserMessage.of("lost"), AssistantMessage(text="lost")))
    assert len(await store.load(new.conversation_id)) == 2
