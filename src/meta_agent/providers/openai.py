"""OpenAI Chat Completions with tools, through the official `openai` SDK; also Ollama, Gemini and any
OpenAI-compatible server (`OPENAI_BASE_URL`)."""

from __future__ import annotations

import json
from typing import Any

import openai
from openai.types.chat import ChatCompletion

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
    ) -> None:
        if not api_key:
            if base_url is None:
                raise ModelNotConfigured(f"{label}:{model}: set OPENAI_API_KEY (or OPENAI_BASE_URL for a local server)")
            api_key = "none"  # local OpenAI-compatible servers take any key
        self._name = f"{label}:{model}"
        self._model = model
        options = {} if timeout is None else {"timeout": timeout}  # per attempt; None keeps the SDK's 600 s
        self._client = openai.AsyncOpenAI(api_key=api_key, base_url=base_url, **options)
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
        try:
            # The SDK's own `post`, not `chat.completions.create`: the body is already in wire form, and create's
            # typed-dict transform walks the whole transcript on every turn (milliseconds a turn, growing).
            completion = await self._client.post("/chat/completions", body=arguments, cast_to=ChatCompletion)
            return _response(completion)
        except openai.OpenAIError as exc:
            raise provider_error(
                exc, openai, name=self._name, key_variable=self._key_variable, base_url=str(self._client.base_url)
            ) from None
        except MALFORMED as exc:
            raise malformed_answer(exc, name=self._name) from None


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
            entry: dict[str, Any] = {"role": "assistant", "content": text or None}
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
            # Tool messages carry text only; images follow in one user message after all of them.
            out: list[dict[str, Any]] = []
            images: list[ImagePart] = []
            for result in results:
                result_images = [p for p in result.parts if isinstance(p, ImagePart)]
                images.extend(result_images)
                text = f"[error] {result.text}" if result.is_error else result.text
                if result_images:
                    text += f"\n[{len(result_images)} image(s) from this tool follow in the next message]"
                out.append({"role": "tool", "tool_call_id": result.call_id, "content": text})
            if images:
                out.append({"role": "user", "content": _content(tuple(images))})
            return out
    raise AssertionError(f"unknown message {message!r}")


def _content(parts: tuple[TextPart | ImagePart, ...]) -> str | list[dict[str, Any]]:
    if all(isinstance(p, TextPart) for p in parts):
        return "\n".join(p.text for p in parts if isinstance(p, TextPart))
    return [
        {"type": "text", "text": p.text}
        if isinstance(p, TextPart)
        else {"type": "image_url", "image_url": {"url": f"data:{p.mime_type};base64,{p.data}"}}
        for p in parts
    ]


def _response(completion: Any) -> ModelResponse:
    if not completion.choices:
        return ModelResponse(usage=_usage(completion))
    message = completion.choices[0].message
    calls = tuple(_tool_call(call) for call in message.tool_calls or () if call.type == "function")
    # OpenAI-compatible servers (Ollama, vLLM, DeepSeek) put reasoning in a non-standard field.
    extra = message.model_extra or {}
    reasoning = extra.get("reasoning_content") or extra.get("reasoning")
    thinking = (ThinkingPart(text=reasoning),) if isinstance(reasoning, str) and reasoning else ()
    return ModelResponse(text=message.content or "", tool_calls=calls, thinking=thinking, usage=_usage(completion))


def _tool_call(call: Any) -> ToolCall:
    raw = call.function.arguments or "{}"
    if isinstance(raw, dict):  # some OpenAI-compatible servers send an object, not its JSON text
        return ToolCall(id=call.id, name=call.function.name, arguments=raw)
    try:
        arguments = json.loads(raw)
    except json.JSONDecodeError as exc:
        return ToolCall(id=call.id, name=call.function.name, arguments={}, invalid_arguments=f"not JSON ({exc.msg})")
    if not isinstance(arguments, dict):
        return ToolCall(id=call.id, name=call.function.name, arguments={}, invalid_arguments="not a JSON object")
    return ToolCall(id=call.id, name=call.function.name, arguments=arguments)


def _usage(completion: Any) -> Usage:
    usage = completion.usage
    if usage is None:
        return Usage()
    return Usage(input_tokens=usage.prompt_tokens or 0, output_tokens=usage.completion_tokens or 0)
