"""OpenAI Chat Completions with tools, through the official `openai` SDK; also Ollama, Gemini and any
OpenAI-compatible server (`OPENAI_BASE_URL`)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import openai

from meta_agent.core.messages import (
    MAX_ARGUMENT_CHARS,
    TOO_DEEP,
    TOO_LARGE,
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
    ToolResult,
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
    malformed,
    provider_error,
    token_count,
    vendor_http_client,
)


class OpenAIProvider:
    """One model behind the Chat Completions wire format."""

    def __init__(
        self,
        model: str,
        *,
        label: str = "openai",
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float | None = None,
        aiohttp: bool = False,
    ) -> None:
        """`aiohttp`: send requests through the SDK's aiohttp transport (`vendor_http_client`)."""
        if not api_key:
            if base_url is None:
                raise ModelNotConfigured(f"{label}:{model}: set OPENAI_API_KEY (or OPENAI_BASE_URL for a local server)")
            api_key = "none"  # local OpenAI-compatible servers take any key
        self._name = f"{label}:{model}"
        self._model = model
        # per attempt; None keeps the SDK's own 600 s
        per_attempt = openai.NOT_GIVEN if timeout is None else timeout
        http_client = vendor_http_client(openai, aiohttp)
        self._client = openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url, timeout=per_attempt, http_client=http_client
        )
        self._key_variable = {"gemini": "GEMINI_API_KEY", "ollama": "OLLAMA_HOST"}.get(label, "OPENAI_API_KEY")

    @property
    def name(self) -> str:
        return self._name

    @property
    def accepts_images(self) -> bool:
        return True

    async def aclose(self) -> None:
        await self._client.close()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        arguments: dict[str, Any] = {"model": self._model, "messages": _messages(request)}
        if request.tools:
            arguments["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                }
                for t in request.tools
            ]
            arguments["tool_choice"] = request.tool_choice
        if request.max_output_tokens:
            arguments["max_completion_tokens"] = request.max_output_tokens
        answer = await self.post("/chat/completions", arguments)
        try:
            return _response(answer)
        except WrongShape as exc:
            raise answer_error(self._name, exc) from None

    async def post(self, path: str, body: dict[str, Any]) -> object:
        """POST `body` to `path`, the answer as plain JSON.

        Raises:
            ProviderError: the request failed (after the SDK's retries), or its answer is not JSON.
        """
        try:
            # The SDK's own `post`, not `chat.completions.create` (or `responses.create`): the body is already in
            # wire form, and create's typed-dict transform walks the whole transcript on every turn (milliseconds a
            # turn, growing). The answer comes back as plain JSON, checked field by field by the caller.
            return await self._client.post(path, body=body, cast_to=object)
        except openai.OpenAIError as exc:
            raise provider_error(
                exc, openai, name=self._name, key_variable=self._key_variable, base_url=str(self._client.base_url)
            ) from None
        except UNREADABLE as exc:
            raise answer_error(self._name, exc) from None


def _messages(request: ModelRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": request.system}]
    for message in request.messages:
        out.extend(_message(message))
    return out


def _message(message: Message) -> list[dict[str, Any]]:
    match message:
        case SystemMessage(text=text):
            return [{"role": "system", "content": text}]
        case UserMessage(parts=parts):
            return [{"role": "user", "content": _content(parts)}]
        case AssistantMessage(text=text, tool_calls=calls):
            # Always text, "" for none: OpenAI wants content without tool calls, and llama.cpp's server refuses
            # null (and its chat templates read the field, so it cannot be left out either).
            entry: dict[str, Any] = {"role": "assistant", "content": text}
            if calls:
                entry["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": json.dumps(dict(call.arguments))},
                    }
                    for call in calls
                ]
            return [entry]
        case ToolMessage(results=results):
            texts, images = tool_outputs(results)
            out: list[dict[str, Any]] = [
                {"role": "tool", "tool_call_id": call_id, "content": text} for call_id, text in texts
            ]
            if images:
                out.append({"role": "user", "content": _content(images)})
            return out
    raise AssertionError(f"unknown message {message!r}")


def tool_outputs(results: tuple[ToolResult, ...]) -> tuple[list[tuple[str, str]], tuple[ImagePart, ...]]:
    """The text of each result by call id, and the images of all of them. Both OpenAI wire formats carry a tool's
    output as text only: its images follow in one user message after all the outputs, which each say so."""
    texts: list[tuple[str, str]] = []
    images: list[ImagePart] = []
    for result in results:
        result_images = [p for p in result.parts if isinstance(p, ImagePart)]
        images.extend(result_images)
        text = f"[error] {result.text}" if result.is_error else result.text
        if result_images:
            text += f"\n[{len(result_images)} image(s) from this tool follow in the next message]"
        texts.append((result.call_id, text))
    return texts, tuple(images)


def _content(parts: tuple[TextPart | ImagePart, ...]) -> str | list[dict[str, Any]]:
    if all(isinstance(p, TextPart) for p in parts):
        return "\n".join(p.text for p in parts if isinstance(p, TextPart))
    return [
        {"type": "text", "text": p.text}
        if isinstance(p, TextPart)
        else {"type": "image_url", "image_url": {"url": f"data:{p.mime_type};base64,{p.data}"}}
        for p in parts
    ]


def _response(answer: object) -> ModelResponse:
    """A chat completion's first choice, checked: what OpenAI-compatible servers legitimately vary (`content` null
    beside tool calls, or a list of parts; no usage; no call ids) is read, anything else is `WrongShape`."""
    completion = answer_object(answer, "choices")
    choices = field(completion, "choices", list, "")
    if not choices:
        raise malformed("choices is empty")
    choice = checked(choices[0], dict, "choices[0]")
    message = field(choice, "message", dict, "choices[0]")
    where = "choices[0].message"
    calls = field(message, "tool_calls", (list, type(None)), where) or []
    if "content" not in message and not calls:  # a reply says something, if only "" or null beside its calls
        raise malformed(f"{where} has neither content nor tool_calls")
    # OpenAI-compatible servers (Ollama, vLLM, DeepSeek) put reasoning in a non-standard field.
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    return ModelResponse(
        text=_text(field(message, "content", (str, list, type(None)), where), f"{where}.content"),
        tool_calls=_tool_calls(calls, f"{where}.tool_calls"),
        thinking=(ThinkingPart(text=reasoning),) if isinstance(reasoning, str) and reasoning else (),
        usage=_usage(field(completion, "usage", (dict, type(None)), "")),
        model=_said(completion.get("model")),
        id=_said(completion.get("id")),
        finish_reasons=tuple(filter(None, (_said(choice.get("finish_reason")),))),
    )


def _said(value: object) -> str:
    """What a response says of itself (its model, id, finish reason): a string, else nothing."""
    return value if isinstance(value, str) else ""


def _text(content: str | list[Any] | None, where: str) -> str:
    """`content` is text, or (Mistral and others) a list of parts of which the text ones count."""
    if not isinstance(content, list):
        return content or ""
    parts = [(checked(part, dict, f"{where}[{i}]"), f"{where}[{i}]") for i, part in enumerate(content)]
    return "".join(field(part, "text", str, at) for part, at in parts if part.get("type") == "text")


def _tool_calls(calls: list[Any], where: str) -> tuple[ToolCall, ...]:
    """The function calls (the only kind of tool we offer); a call with no type is one."""
    out: list[ToolCall] = []
    for index, call in enumerate(calls):
        if checked(call, dict, f"{where}[{index}]").get("type", "function") == "function":
            out.append(_tool_call(call, f"{where}[{index}]"))
    return tuple(out)


def _tool_call(call: dict[str, Any], where: str) -> ToolCall:
    function = field(call, "function", dict, where)
    name = field(function, "name", str, f"{where}.function")
    call_id = field(call, "id", (str, type(None)), where)
    return call_of(call_id, name, field(function, "arguments", (str, dict, type(None)), f"{where}.function"))


def call_of(call_id: str | None, name: str, raw: str | dict[str, Any] | None) -> ToolCall:
    """A function call of either OpenAI wire format: its arguments are JSON text (an object from some
    OpenAI-compatible servers); arguments that are no JSON object are kept as a problem for the model to read."""
    # A few local servers send no id. One made up must be unique in the whole transcript, not only in this answer:
    # Anthropic refuses a transcript in which two tool calls share an id.
    call_id = call_id or f"call_{uuid.uuid4().hex[:24]}"
    if isinstance(raw, dict):
        return ToolCall(id=call_id, name=name, arguments=raw)
    if raw is not None and len(raw) > MAX_ARGUMENT_CHARS:  # refused unread: parsing it alone would take seconds
        return ToolCall(id=call_id, name=name, arguments={}, invalid_arguments=TOO_LARGE)
    try:
        arguments = json.loads(raw or "{}")
    except json.JSONDecodeError as exc:
        return ToolCall(id=call_id, name=name, arguments={}, invalid_arguments=f"not JSON ({exc.msg})")
    except RecursionError:
        return ToolCall(id=call_id, name=name, arguments={}, invalid_arguments=TOO_DEEP)
    if not isinstance(arguments, dict):
        return ToolCall(id=call_id, name=name, arguments={}, invalid_arguments="not a JSON object")
    return ToolCall(id=call_id, name=name, arguments=arguments)


def _usage(usage: dict[str, Any] | None) -> Usage:
    if usage is None:
        return Usage()
    details = field(usage, "completion_tokens_details", (dict, type(None)), "usage") or {}
    return Usage(
        input_tokens=token_count(usage, "prompt_tokens"),
        output_tokens=token_count(usage, "completion_tokens"),
        reasoning_tokens=token_count(details, "reasoning_tokens", "usage.completion_tokens_details"),
    )
