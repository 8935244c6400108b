"""Conversations that continue, across calls and across a server restart, stored in a real SQLite file."""

from __future__ import annotations

from pathlib import Path

import pytest
import structlog
from conftest import fault_entry, openai_env
from fake_llm import FakeLLM, openai_reply
from mcp import Client

from meta_agent.config import Settings
from meta_agent.conversations import Conversations, trim
from meta_agent.messages import AssistantMessage, TextPart, ToolCall, ToolMessage, ToolResult, UserMessage
from meta_agent.server import build_server

pytestmark = pytest.mark.anyio


def said(llm: FakeLLM, request: int = -1) -> list[tuple[str, str]]:
    """(role, text) of what the model was sent, system prompt left out."""
    out = []
    for m in llm.requests[request].body["messages"][1:]:
        content = m.get("content") or ""
        out.append((m["role"], content if isinstance(content, str) else str(content)))
    return out


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
    assert result.content[0].text == "The answer."  # type: ignore[union-attr]
    assert result.structured_content["conversation_id"] is None  # type: ignore[index]
    assert [e["path"] for e in logs if e["event"] == "conversation_not_saved"] == [str(settings.conversations_db)]


def turn(n: int, size: int) -> list:
    call = ToolCall(id=f"c{n}", name="f__echo", arguments={"text": "x"})
    return [
        UserMessage.of(f"turn {n}"),
        AssistantMessage(tool_calls=(call,)),
        ToolMessage(results=(ToolResult(call_id=f"c{n}", name="f__echo", parts=(TextPart(text="y" * size),)),)),
        AssistantMessage(text=f"answer {n}"),
    ]


def test_trimming_drops_whole_old_turns_and_keeps_the_newest() -> None:
    transcript = tuple(turn(1, 500) + turn(2, 500) + turn(3, 500))
    kept, dropped = trim(transcript, max_chars=2500)
    assert dropped == 1
    assert kept[0] == UserMessage.of("turn 2")  # never a tool result without its call
    assert kept[-1] == AssistantMessage(text="answer 3")
    one_huge = tuple(turn(1, 10_000))
    assert trim(one_huge, max_chars=100) == (one_huge, 0)  # the newest turn stays, whatever its size


async def test_a_trimmed_conversation_says_so(tmp_path: Path) -> None:
    store = Conversations(tmp_path / "c.sqlite3")
    dropped = await store.save("c", tuple(turn(1, 300_000) + turn(2, 300_000)))
    assert dropped == 1
    assert (await store.load("c"))[0] == UserMessage.of("turn 2")
