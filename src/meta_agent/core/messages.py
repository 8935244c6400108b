"""The neutral transcript: what the loop and every provider speak. No MCP or vendor types here.

Tool names in the transcript are the model-facing aliases (the names the model saw and called).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True, kw_only=True)
class TextPart:
    text: str
    kind: Literal["text"] = "text"


@dataclass(frozen=True, kw_only=True)
class ImagePart:
    data: str  # base64
    mime_type: str
    kind: Literal["image"] = "image"


@dataclass(frozen=True, kw_only=True)
class ThinkingPart:
    """Reasoning a provider returned: its text (or summary), and `signature`, what lets the provider verify it (or
    read it: an encrypted reasoning item) when it is sent back. `origin` is the wire format that made it, which alone
    can take it back ("anthropic", "openai-responses"; None in transcripts saved before it was recorded, which were
    Anthropic's or unsigned)."""

    text: str
    signature: str | None = None
    redacted: bool = False
    origin: str | None = None
    kind: Literal["thinking"] = "thinking"


Part = TextPart | ImagePart

# Tool arguments nest objects and lists this deep at most: no tool's schema needs more, and pydantic's JSON (the MCP
# SDK's wire, our structured result, most child servers) gives up at about 250 levels, Python's own near 1000.
MAX_ARGUMENT_DEPTH = 64
TOO_DEEP = f"nested more than {MAX_ARGUMENT_DEPTH} levels deep"


def too_deep(value: Any, limit: int = MAX_ARGUMENT_DEPTH) -> bool:
    """Whether `value` nests objects and lists more than `limit` levels (`{}` is one). Level by level, not
    recursive: a value of any depth is looked at safely."""
    level = [value]
    for _ in range(limit + 1):
        level = [item for item in level if isinstance(item, (Mapping, list, tuple))]  # the objects and lists
        if not level:
            return False
        level = [child for item in level for child in (item.values() if isinstance(item, Mapping) else item)]
    return True


# The most characters a tool call's arguments may hold: room for a data URL of describe_image's largest image (20 MB,
# 27 million characters of base64) and more. Larger arguments are refused before any check, tool or record sees them:
# kept, they would cost seconds of the event loop in every later step of the run (the transcript is sent each turn).
MAX_ARGUMENT_CHARS = 32_000_000
TOO_LARGE = f"over {MAX_ARGUMENT_CHARS:,} characters long"


def too_large(value: Any, limit: int = MAX_ARGUMENT_CHARS) -> bool:
    """Whether `value` holds more than `limit` characters of strings and keys, about its size as JSON. Without
    recursion, and looking no further than `limit` items: a value of any size or depth costs at most that."""
    total = 0
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, Mapping):
            for key, child in item.items():
                total += len(str(key)) + 1
                if total > limit:
                    return True
                pending.append(child)
        elif isinstance(item, list | tuple):
            total += len(item)
            if total <= limit:
                pending.extend(item)
        else:
            total += 1
        if total > limit:
            return True
    return False


@dataclass(frozen=True, kw_only=True)
class ToolCall:
    id: str
    name: str  # the model-facing alias
    arguments: Mapping[str, Any]
    # Set when the provider's arguments were not a JSON object: what was wrong, for the model to read.
    invalid_arguments: str | None = None


@dataclass(frozen=True, kw_only=True)
class ToolResult:
    call_id: str
    name: str  # the model-facing alias
    parts: tuple[Part, ...]
    is_error: bool = False

    @property
    def text(self) -> str:
        return "\n".join(part.text for part in self.parts if isinstance(part, TextPart))


@dataclass(frozen=True, kw_only=True)
class SystemMessage:
    text: str
    role: Literal["system"] = "system"


@dataclass(frozen=True, kw_only=True)
class UserMessage:
    parts: tuple[Part, ...]
    role: Literal["user"] = "user"

    @classmethod
    def of(cls, text: str) -> UserMessage:
        return cls(parts=(TextPart(text=text),))


@dataclass(frozen=True, kw_only=True)
class AssistantMessage:
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    thinking: tuple[ThinkingPart, ...] = ()
    role: Literal["assistant"] = "assistant"


@dataclass(frozen=True, kw_only=True)
class ToolMessage:
    """The results of one step's tool calls, in the order the model asked for them."""

    results: tuple[ToolResult, ...]
    role: Literal["tool"] = "tool"


Message = SystemMessage | UserMessage | AssistantMessage | ToolMessage


@dataclass(frozen=True, kw_only=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0  # of the output tokens, those the model spent reasoning

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
        )

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, kw_only=True)
class ToolSchema:
    """A tool as the model is shown it."""

    name: str  # the alias
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True, kw_only=True)
class ModelRequest:
    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSchema, ...] = ()
    # "none": the tools are described (so earlier tool calls in the transcript stay valid) but may not be called.
    tool_choice: Literal["auto", "none"] = "auto"
    max_output_tokens: int | None = None


@dataclass(frozen=True, kw_only=True)
class ModelResponse:
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    thinking: tuple[ThinkingPart, ...] = ()
    usage: Usage = field(default_factory=Usage)
    # What the provider said of its answer, where it says it (for telemetry): the model that answered (an alias's
    # dated version), the response's id, and why it stopped ("stop", "tool_calls", "end_turn"...).
    model: str = ""
    id: str = ""
    finish_reasons: tuple[str, ...] = ()

    def as_message(self) -> AssistantMessage:
        return AssistantMessage(text=self.text, tool_calls=self.tool_calls, thinking=self.thinking)


def jsonable(value: Any) -> Any:
    """The `default` of `json.dumps` for our values: a dataclass as its fields, a mapping as a dict, else its text.
    The encoder recurses in C, so encoding costs little more than the size of the value."""
    if dataclasses.is_dataclass(value):
        return vars(value)
    if isinstance(value, Mapping):
        return dict(value)
    return str(value)
