"""Anthropic Messages with tools, through the official `anthropic` SDK. Thinking blocks become thinking parts and
are sent back, signed, on the next turn (the API requires it during tool use)."""

from __future__ import annotations

from typing import Any

import anthropic

from meta_agent.errors import ModelNotConfigured
from meta_agent.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    ModelRequest,
    ModelResponse,
    SystemMessage,
    TextPart,
    ThinkingPart,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
)
from meta_agent.providers import MALFORMED, malformed_answer, provider_error

# Messages needs max_tokens; this is enough for an answer or a round of tool calls.
DEFAULT_MAX_TOKENS = 8192


class AnthropicProvider:
    def __init__(
        self, model: str, *, api_key: str | None, base_url: str | None = None, timeout: float | None = None
    ) -> None:
        if not api_key:
            raise ModelNotConfigured(f"anthropic:{model}: set ANTHROPIC_API_KEY")
        self._name = f"anthropic:{model}"
        self._model = model
        options = {} if timeout is None else {"timeout": timeout}  # per attempt; None keeps the SDK's own
        self._client = anthropic.AsyncAnthropic(api_key=api_key, base_url=base_url, **options)

    @property
    def name(self) -> str:
        return self._name

    @property
    def accepts_images(self) -> bool:
        return True

    async def aclose(self) -> None:
        await self._client.close()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        arguments: dict[str, Any] = {
            "model": self._model,
            "max_tokens": request.max_output_tokens or DEFAULT_MAX_TOKENS,
            "system": request.system,
            "messages": _messages(request.messages),
        }
        if request.tools:
            arguments["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters} for t in request.tools
            ]
            arguments["tool_choice"] = {"type": request.tool_choice}
        try:
            message = await self._client.messages.create(**arguments)
            return _response(message)
        except anthropic.AnthropicError as exc:
            raise provider_error(
                exc, anthropic, name=self._name, key_variable="ANTHROPIC_API_KEY", base_url=str(self._client.base_url)
            ) from None
        except MALFORMED as exc:
            raise malformed_answer(exc, name=self._name) from None


def _messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """Messages alternate user/assistant: adjacent blocks of one role are merged into one message."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role, blocks = _blocks(message)
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


def _blocks(message: Message) -> tuple[str, list[dict[str, Any]]]:
    match message:
        case SystemMessage(text=text):  # a mid-conversation instruction: Messages has no system role there
            return "user", [{"type": "text", "text": text}]
        case UserMessage(parts=parts):
            return "user", _parts(parts, empty="(empty message)")
        case AssistantMessage(text=text, tool_calls=calls, thinking=thinking):
            blocks = [_thinking(part) for part in thinking]
            if text:
                blocks.append({"type": "text", "text": text})
            blocks.extend(
                {"type": "tool_use", "id": call.id, "name": call.name, "input": dict(call.arguments)} for call in calls
            )
            return "assistant", blocks
        case ToolMessage(results=results):
            return "user", [
                {
                    "type": "tool_result",
                    "tool_use_id": result.call_id,
                    "content": _parts(result.parts, empty="(no output)"),
                    "is_error": result.is_error,
                }
                for result in results
            ]
    raise AssertionError(f"unknown message {message!r}")


def _parts(parts: tuple[TextPart | ImagePart, ...], *, empty: str) -> list[dict[str, Any]]:
    """Messages refuses empty text blocks: leave them out, and say `empty` when nothing is left."""
    blocks = [_part(p) for p in parts if not (isinstance(p, TextPart) and not p.text)]
    return blocks or [{"type": "text", "text": empty}]


def _part(part: TextPart | ImagePart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    return {"type": "image", "source": {"type": "base64", "media_type": part.mime_type, "data": part.data}}


def _thinking(part: ThinkingPart) -> dict[str, Any]:
    if part.redacted:
        return {"type": "redacted_thinking", "data": part.signature or ""}
    return {"type": "thinking", "thinking": part.text, "signature": part.signature or ""}


def _response(message: Any) -> ModelResponse:
    texts: list[str] = []
    calls: list[ToolCall] = []
    thinking: list[ThinkingPart] = []
    for block in message.content:
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "tool_use":
            arguments = block.input if isinstance(block.input, dict) else {}
            invalid = None if isinstance(block.input, dict) else "not a JSON object"
            calls.append(ToolCall(id=block.id, name=block.name, arguments=arguments, invalid_arguments=invalid))
        elif block.type == "thinking":
            thinking.append(ThinkingPart(text=block.thinking, signature=block.signature))
        elif block.type == "redacted_thinking":
            thinking.append(ThinkingPart(text="", signature=block.data, redacted=True))
    usage = message.usage
    input_tokens = usage.input_tokens + (usage.cache_creation_input_tokens or 0) + (usage.cache_read_input_tokens or 0)
    return ModelResponse(
        text="\n".join(texts),
        tool_calls=tuple(calls),
        thinking=tuple(thinking),
        usage=Usage(input_tokens=input_tokens, output_tokens=usage.output_tokens),
    )
