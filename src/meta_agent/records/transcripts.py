"""A conversation's transcript as it is stored: bounded by dropping its oldest whole turns, and read back by pydantic
over the neutral types with every tool call answered exactly once, right after it (what the providers accept)."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Annotated

from pydantic import Field, TypeAdapter, ValidationError

from meta_agent.core.messages import (
    AssistantMessage,
    Message,
    TextPart,
    ToolCall,
    ToolMessage,
    ToolResult,
    UserMessage,
    jsonable,
)
from meta_agent.errors import ConfigError
from meta_agent.shared.validation import refusal

# About 100k tokens of text: what fits the context of every current model with room for the answer.
MAX_CHARS = 400_000
NOT_RUN = "not run: the run ended before this tool call was made"


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


def decode(conversation_id: str, stored: str) -> tuple[Message, ...]:
    """A stored transcript as messages, every tool call answered (records of older versions may lack results).

    Raises:
        ConfigError: the record cannot be decoded, in one line naming the conversation.
    """
    try:
        return answered(_transcript().validate_python(json.loads(stored)))
    except ValidationError as exc:
        problem = refusal(exc)
    except (TypeError, ValueError, RecursionError) as exc:  # not JSON text, or nested deeper than the decoder goes
        problem = f"not JSON: {str(exc) or type(exc).__name__}"
    raise ConfigError(
        f"conversation_id: conversation {conversation_id!r} is stored in a form this version cannot read ({problem})"
    )


@functools.cache
def _transcript() -> TypeAdapter[tuple[Message, ...]]:
    """Decodes what `save` wrote; `role` tells the message types apart. Fields added later have defaults, so older
    records still load. Built on first use: building it costs every start ~10 ms, and most runs continue nothing."""
    return TypeAdapter(tuple[Annotated[Message, Field(discriminator="role")], ...])


def answered(transcript: Sequence[Message]) -> tuple[Message, ...]:
    """The transcript with every tool call answered exactly once, right after the message that made it, in call
    order: a missing result becomes an error result saying the call did not run, and a result that answers no call
    of the message before it is left out. OpenAI and Anthropic refuse a transcript that breaks this."""
    out: list[Message] = []
    for index, message in enumerate(transcript):
        if isinstance(message, ToolMessage):
            continue  # rebuilt below, after the message whose calls it answers
        out.append(message)
        if isinstance(message, AssistantMessage) and message.tool_calls:
            after = transcript[index + 1] if index + 1 < len(transcript) else None
            given = {result.call_id: result for result in after.results} if isinstance(after, ToolMessage) else {}
            out.append(ToolMessage(results=tuple(given.get(call.id) or _not_run(call) for call in message.tool_calls)))
    return tuple(out)


def _not_run(call: ToolCall) -> ToolResult:
    return ToolResult(call_id=call.id, name=call.name, parts=(TextPart(text=NOT_RUN),), is_error=True)
