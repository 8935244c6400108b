"""OpenAI's Responses API with tools, through the official `openai` SDK: the agent-loop API of OpenAI's reasoning
models. Nothing is stored at OpenAI (`store: false`): each turn sends the whole transcript, with the reasoning items
of earlier turns as the encrypted content the API returned (Chat Completions drops them between tool calls).
Reasoning summaries become thinking parts, as Anthropic's thinking does.
"""

from __future__ import annotations

import json
import re
from typing import Any

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
from meta_agent.errors import ProviderError, ProviderRateLimited, ProviderUnavailable
from meta_agent.providers.openai import OpenAIProvider, call_of, tool_outputs
from meta_agent.providers.wire import (
    DETAIL_SHOWN,
    WrongShape,
    answer_error,
    answer_object,
    checked,
    field,
    token_count,
)
from meta_agent.shared.text import one_line

# What this wire format's thinking parts say they came from: only those are sent back as reasoning items.
ORIGIN = "openai-responses"
# Model families without reasoning: asking them for reasoning summaries or encrypted reasoning is refused. Any other
# model (gpt-5 and later, the o-series, names we do not know) is asked.
_NOT_REASONING = re.compile(r"(ft:)?(gpt-4|gpt-3\.5|chatgpt-)")


class OpenAIResponsesProvider(OpenAIProvider):
    """One model behind the Responses API."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        answer = await self.post("/responses", request_body(self._model, request))
        try:
            return _response(answer, self._name)
        except WrongShape as exc:
            raise answer_error(self._name, exc) from None


def request_body(model: str, request: ModelRequest) -> dict[str, Any]:
    """The JSON body of a Responses API request for `request` (also what the benchmarks count the tokens of)."""
    body: dict[str, Any] = {"model": model, "instructions": request.system, "input": _input(request), "store": False}
    if not _NOT_REASONING.match(model):
        body["reasoning"] = {"summary": "auto"}
        body["include"] = ["reasoning.encrypted_content"]
    if request.tools:
        body["tools"] = [
            {"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters}
            for t in request.tools
        ]
        body["tool_choice"] = request.tool_choice
    if request.max_output_tokens:
        body["max_output_tokens"] = request.max_output_tokens
    return body


def _input(request: ModelRequest) -> list[dict[str, Any]]:
    return [item for message in request.messages for item in _items(message)]


def _items(message: Message) -> list[dict[str, Any]]:
    match message:
        case SystemMessage(text=text):
            return [{"role": "developer", "content": text}]
        case UserMessage(parts=parts):
            return [{"role": "user", "content": _content(parts)}]
        case AssistantMessage(text=text, tool_calls=calls, thinking=thinking):
            # In the order the API gave them: reasoning, then the message, then the calls.
            items = [_reasoning_item(part) for part in thinking if part.origin == ORIGIN and part.signature]
            if text:
                items.append({"role": "assistant", "content": text})
            items.extend(
                {"type": "function_call", "call_id": c.id, "name": c.name, "arguments": json.dumps(dict(c.arguments))}
                for c in calls
            )
            return items
        case ToolMessage(results=results):
            texts, images = tool_outputs(results)
            items = [{"type": "function_call_output", "call_id": call_id, "output": text} for call_id, text in texts]
            if images:
                items.append({"role": "user", "content": _content(images)})
            return items
    raise AssertionError(f"unknown message {message!r}")


def _reasoning_item(part: ThinkingPart) -> dict[str, Any]:
    """A reasoning item as it is sent back without storage: its summary and its encrypted content, no id (an id
    names a stored item, and nothing is stored)."""
    summary = [{"type": "summary_text", "text": part.text}] if part.text else []
    return {"type": "reasoning", "summary": summary, "encrypted_content": part.signature}


def _content(parts: tuple[TextPart | ImagePart, ...]) -> list[dict[str, Any]]:
    return [
        {"type": "input_text", "text": p.text}
        if isinstance(p, TextPart)
        else {"type": "input_image", "image_url": f"data:{p.mime_type};base64,{p.data}"}
        for p in parts
    ]


def _response(answer: object, name: str) -> ModelResponse:
    """A response's output items, checked: messages, function calls and reasoning are read; item types we do not
    ask for (built-in tools) are skipped; a failed response is the provider's error."""
    response = answer_object(answer, "output")
    if field(response, "status", (str, type(None)), "") == "failed":
        raise _failed(field(response, "error", (dict, type(None)), ""), name)
    texts: list[str] = []
    calls: list[ToolCall] = []
    thinking: list[ThinkingPart] = []
    for index, raw in enumerate(field(response, "output", list, "")):
        where = f"output[{index}]"
        item = checked(raw, dict, where)
        kind = item.get("type", "message")
        if kind == "message":
            texts.extend(_message_text(item, where))
        elif kind == "function_call":
            call_id = field(item, "call_id", (str, type(None)), where)
            arguments = field(item, "arguments", (str, dict, type(None)), where)
            calls.append(call_of(call_id, field(item, "name", str, where), arguments))
        elif kind == "reasoning":
            thinking.append(_thinking(item, where))
    return ModelResponse(
        text="".join(texts),
        tool_calls=tuple(calls),
        thinking=tuple(thinking),
        usage=_usage(field(response, "usage", (dict, type(None)), "")),
        model=_said(response.get("model")),
        id=_said(response.get("id")),
        finish_reasons=tuple(filter(None, (_said(response.get("status")),))),
    )


def _said(value: object) -> str:
    """What a response says of itself (its model, id, status): a string, else nothing."""
    return value if isinstance(value, str) else ""


def _message_text(item: dict[str, Any], where: str) -> list[str]:
    """The text of an output message: its output_text parts, and a refusal as what the model said."""
    out = []
    for index, raw in enumerate(field(item, "content", list, where)):
        at = f"{where}.content[{index}]"
        part = checked(raw, dict, at)
        if part.get("type") == "output_text":
            out.append(field(part, "text", str, at))
        elif part.get("type") == "refusal":
            out.append(field(part, "refusal", str, at))
    return out


def _thinking(item: dict[str, Any], where: str) -> ThinkingPart:
    summary = field(item, "summary", (list, type(None)), where) or []
    texts = []
    for index, raw in enumerate(summary):
        part = checked(raw, dict, f"{where}.summary[{index}]")
        texts.append(field(part, "text", str, f"{where}.summary[{index}]"))
    encrypted = field(item, "encrypted_content", (str, type(None)), where)
    return ThinkingPart(text="\n\n".join(texts), signature=encrypted, origin=ORIGIN)


def _failed(error: dict[str, Any] | None, name: str) -> ProviderError:
    """A response whose status is `failed`: the server's error (a server error or a rate limit is the provider's
    failure, which a fallback chain passes on)."""
    code = (error or {}).get("code")
    message = one_line(str((error or {}).get("message") or "no reason given"), DETAIL_SHOWN)
    if code == "rate_limit_exceeded":
        return ProviderRateLimited(f"{name}: rate limited: {message}", brief="rate limited")
    if code in ("server_error", "vector_store_timeout"):
        return ProviderUnavailable(f"{name}: the response failed ({code}): {message}", brief=f"failed ({code})")
    return ProviderError(f"{name}: the response failed ({code or 'no code'}): {message}")


def _usage(usage: dict[str, Any] | None) -> Usage:
    if usage is None:
        return Usage()
    details = field(usage, "output_tokens_details", (dict, type(None)), "usage") or {}
    return Usage(
        input_tokens=token_count(usage, "input_tokens"),
        output_tokens=token_count(usage, "output_tokens"),
        reasoning_tokens=token_count(details, "reasoning_tokens", "usage.output_tokens_details"),
    )
