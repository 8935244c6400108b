"""Anthropic Messages with tools, through the official `anthropic` SDK. Thinking blocks become thinking parts and
are sent back, signed, on the next turn (the API requires it during tool use)."""

from __future__ import annotations

from typing import Any

import anthropic

from meta_agent.core.limits import DEFAULT_MAX_OUTPUT_TOKENS
from meta_agent.core.messages import (
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
from meta_agent.errors import ModelNotConfigured
from meta_agent.providers.wire import (
    UNREADABLE,
    WrongShape,
    answer_error,
    answer_object,
    checked,
    field,
    provider_error,
    token_count,
    vendor_http_client,
)

# What this wire format's thinking parts say they came from: only those (and those of transcripts saved before origins
# were recorded) are sent back, never another provider's reasoning from an earlier turn of a fallback chain.
ORIGIN = "anthropic"
# Stands for an answer with no text and no tool call (a model that said nothing): Messages refuses empty content.
NO_ANSWER = "(no answer)"


class AnthropicProvider:
    def __init__(
        self,
        model: str,
        *,
        api_key: str | None,
        base_url: str | None = None,
        timeout: float | None = None,
        aiohttp: bool = False,
    ) -> None:
        """`aiohttp`: send requests through the SDK's aiohttp transport (`vendor_http_client`)."""
        if not api_key:
            raise ModelNotConfigured(f"anthropic:{model}: set ANTHROPIC_API_KEY")
        self._name = f"anthropic:{model}"
        self._model = model
        per_attempt = anthropic.NOT_GIVEN if timeout is None else timeout  # None keeps the SDK's own
        http_client = vendor_http_client(anthropic, aiohttp)
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, timeout=per_attempt, http_client=http_client
        )

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
            "max_tokens": request.max_output_tokens or DEFAULT_MAX_OUTPUT_TOKENS,  # Messages requires one
            "system": request.system,
            "messages": _messages(request.messages),
        }
        if request.tools:
            arguments["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters} for t in request.tools
            ]
            arguments["tool_choice"] = {"type": request.tool_choice}
        try:
            # The answer as plain JSON, checked field by field in `_response`.
            raw = await self._client.messages.with_raw_response.create(**arguments)
            answer = await raw.parse(to=object)
        except anthropic.AnthropicError as exc:
            raise provider_error(
                exc, anthropic, name=self._name, key_variable="ANTHROPIC_API_KEY", base_url=str(self._client.base_url)
            ) from None
        except UNREADABLE as exc:
            raise answer_error(self._name, exc) from None
        try:
            return _response(answer)
        except WrongShape as exc:
            raise answer_error(self._name, exc) from None


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
            blocks = _thinking(thinking)
            if text.strip() or not calls:  # Messages refuses an assistant message with nothing to show
                blocks.append({"type": "text", "text": text if text.strip() else NO_ANSWER})
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
    """Messages refuses text blocks of only white space: leave them out, and say `empty` when nothing is left."""
    blocks = [_part(p) for p in parts if not (isinstance(p, TextPart) and not p.text.strip())]
    return blocks or [{"type": "text", "text": empty}]


def _part(part: TextPart | ImagePart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    return {"type": "image", "source": {"type": "base64", "media_type": part.mime_type, "data": part.data}}


def _thinking(parts: tuple[ThinkingPart, ...]) -> list[dict[str, Any]]:
    """Thinking as Messages gave it: signed, or redacted (its data kept in `signature`). Reasoning without a signature
    (an OpenAI-compatible server's) is left out: Messages refuses unsigned thinking; so is another wire format's."""
    return [
        {"type": "redacted_thinking", "data": part.signature}
        if part.redacted
        else {"type": "thinking", "thinking": part.text, "signature": part.signature}
        for part in parts
        if part.signature and part.origin in (None, ORIGIN)
    ]


def _response(answer: object) -> ModelResponse:
    """A message, checked: `content` is a list of blocks; block types we do not use (server tools, citations)
    are skipped, the ones we use must carry their fields. Anything else is `WrongShape`."""
    message = answer_object(answer, "content")
    texts: list[str] = []
    calls: list[ToolCall] = []
    thinking: list[ThinkingPart] = []
    for index, block in enumerate(field(message, "content", list, "")):
        where = f"content[{index}]"
        kind = field(checked(block, dict, where), "type", str, where)
        if kind == "text":
            texts.append(field(block, "text", str, where))
        elif kind == "tool_use":
            calls.append(_tool_call(block, where))
        elif kind == "thinking":
            signature = field(block, "signature", (str, type(None)), where)
            thinking.append(ThinkingPart(text=field(block, "thinking", str, where), signature=signature, origin=ORIGIN))
        elif kind == "redacted_thinking":
            data = field(block, "data", str, where)
            thinking.append(ThinkingPart(text="", signature=data, redacted=True, origin=ORIGIN))
    return ModelResponse(
        text="\n".join(texts),
        tool_calls=tuple(calls),
        thinking=tuple(thinking),
        usage=_usage(field(message, "usage", (dict, type(None)), "")),
        model=_said(message.get("model")),
        id=_said(message.get("id")),
        finish_reasons=tuple(filter(None, (_said(message.get("stop_reason")),))),
    )


def _said(value: object) -> str:
    """What a message says of itself (its model, id, stop reason): a string, else nothing."""
    return value if isinstance(value, str) else ""


def _tool_call(block: dict[str, Any], where: str) -> ToolCall:
    call_id, name = field(block, "id", str, where), field(block, "name", str, where)
    arguments = block.get("input")
    if isinstance(arguments, dict):
        return ToolCall(id=call_id, name=name, arguments=arguments)
    return ToolCall(id=call_id, name=name, arguments={}, invalid_arguments="not a JSON object")


def _usage(usage: dict[str, Any] | None) -> Usage:
    """Input tokens include those written to and read from the prompt cache. No usage (a proxy's) counts nothing."""
    if usage is None:
        return Usage()
    cached = token_count(usage, "cache_creation_input_tokens") + token_count(usage, "cache_read_input_tokens")
    return Usage(
        input_tokens=token_count(usage, "input_tokens") + cached, output_tokens=token_count(usage, "output_tokens")
    )
