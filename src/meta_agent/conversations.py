"""Conversations that continue: each `agent` or `ask` call returns a `conversation_id`; passing it back continues the
same transcript. Stored in SQLite (embedded; survives a restart) and bounded: when a transcript grows past
`MAX_CHARS`, its oldest whole turns are dropped and the result says so.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import anyio

from meta_agent.errors import ConfigError
from meta_agent.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    Part,
    SystemMessage,
    TextPart,
    ThinkingPart,
    ToolCall,
    ToolMessage,
    ToolResult,
    UserMessage,
    jsonable,
)

T = TypeVar("T")

# About 100k tokens of text: what fits the context of every current model with room for the answer.
MAX_CHARS = 400_000
SCHEMA = """
create table if not exists conversations (
    id text primary key,
    messages text not null,
    updated text not null default (datetime('now'))
)
"""


def default_path(environ: Mapping[str, str]) -> Path:
    """The user data dir: $XDG_DATA_HOME/meta-agent/conversations.sqlite3, else under ~/.local/share."""
    base = environ.get("XDG_DATA_HOME") or str(Path(environ.get("HOME", "~")).expanduser() / ".local" / "share")
    return Path(base) / "meta-agent" / "conversations.sqlite3"


class Conversations:
    """The store: one connection, used on worker threads one call at a time, so the event loop never waits on disk.
    Write-ahead logging: a save is one append, and other processes on the same file can read meanwhile."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._connection: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    async def load(self, conversation_id: str) -> tuple[Message, ...]:
        """Raises:
        ConfigError: no conversation has that id.
        """
        row = await anyio.to_thread.run_sync(self._in_transaction, _select, conversation_id)
        if row is None:
            raise ConfigError(f"conversation_id: unknown conversation {conversation_id!r}")
        return tuple(message_from(m) for m in json.loads(row))

    async def save(self, conversation_id: str, transcript: tuple[Message, ...]) -> int:
        """Store the transcript, trimmed to the bound; returns how many of its oldest turns were dropped.

        Raises:
            sqlite3.Error, OSError: the store cannot be written.
        """
        kept, dropped = trim(transcript)
        body = json.dumps(kept, ensure_ascii=False, default=jsonable)
        await anyio.to_thread.run_sync(self._in_transaction, _upsert, conversation_id, body)
        return dropped

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def _in_transaction(self, work: Callable[..., T], *args: Any) -> T:
        with self._lock:
            if self._connection is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                connection = sqlite3.connect(self.path, timeout=10, check_same_thread=False)
                connection.execute("pragma journal_mode=wal")
                connection.execute("pragma synchronous=normal")
                # KiB: lookups are by key, so the 2 MiB default cache would only add to resident memory
                connection.execute("pragma cache_size=-256")
                connection.execute(SCHEMA)
                self._connection = connection
            with self._connection:
                return work(self._connection, *args)


def _select(connection: sqlite3.Connection, conversation_id: str) -> str | None:
    row = connection.execute("select messages from conversations where id = ?", (conversation_id,)).fetchone()
    return row[0] if row else None


def _upsert(connection: sqlite3.Connection, conversation_id: str, body: str) -> None:
    connection.execute(
        "insert into conversations (id, messages) values (?, ?) "
        "on conflict(id) do update set messages = excluded.messages, updated = datetime('now')",
        (conversation_id, body),
    )


def trim(transcript: tuple[Message, ...], max_chars: int = MAX_CHARS) -> tuple[tuple[Message, ...], int]:
    """Drop the oldest whole turns (a turn starts at a user message) until the rest fits; a tool call is never
    separated from its result. The newest turn is always kept."""
    turns: list[list[Message]] = []
    for message in transcript:
        if isinstance(message, UserMessage) or not turns:
            turns.append([])
        turns[-1].append(message)
    sizes = [sum(_size(m) for m in turn) for turn in turns]
    total, dropped = sum(sizes), 0
    while dropped < len(turns) - 1 and total > max_chars:
        total -= sizes[dropped]
        dropped += 1
    return tuple(m for turn in turns[dropped:] for m in turn), dropped


def _size(message: Message) -> int:
    return len(json.dumps(message, ensure_ascii=False, default=jsonable))


def message_from(data: dict[str, Any]) -> Message:
    role = data["role"]
    if role == "system":
        return SystemMessage(text=data["text"])
    if role == "user":
        return UserMessage(parts=tuple(_part(p) for p in data["parts"]))
    if role == "assistant":
        return AssistantMessage(
            text=data["text"],
            tool_calls=tuple(
                ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"], invalid_arguments=c["invalid_arguments"])
                for c in data["tool_calls"]
            ),
            thinking=tuple(
                ThinkingPart(text=t["text"], signature=t["signature"], redacted=t["redacted"]) for t in data["thinking"]
            ),
        )
    return ToolMessage(
        results=tuple(
            ToolResult(
                call_id=r["call_id"], name=r["name"], parts=tuple(_part(p) for p in r["parts"]), is_error=r["is_error"]
            )
            for r in data["results"]
        )
    )


def _part(data: dict[str, Any]) -> Part:
    if data["kind"] == "image":
        return ImagePart(data=data["data"], mime_type=data["mime_type"])
    return TextPart(text=data["text"])
