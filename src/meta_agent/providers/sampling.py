"""The host's own model through MCP sampling with tools (SEP-1577), in either protocol era.

Each model turn is one `sampling/createMessage` request with the run's tools; how it reaches the host is the caller's
(`Send`, from the MCP front): on a 2025-11-25 session a request of its own on the session's back-channel, on
2026-07-28, which has none, one more round of the call (an input request the host answers by calling again).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import mcp.types as t
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from meta_agent.core.limits import DEFAULT_MAX_OUTPUT_TOKENS
from meta_agent.core.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    ModelRequest,
    ModelResponse,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from meta_agent.errors import ProviderError
from meta_agent.shared.validation import refusal

# Sends one sampling request to the host and returns its answer: None where none came (a round nobody answered, or
# answered under another key); a 2026-07-28 answer may be any input response, which `complete` checks.
Send = Callable[[t.CreateMessageRequestParams], Awaitable[t.InputResponse | None]]


class SamplingProvider:
    """Asks the caller's host to run the model (`sampling/createMessage` with tools) within the caller's call."""

    def __init__(self, send: Send) -> None:
        self._send = send

    @property
    def name(self) -> str:
        return "sampling"

    @property
    def accepts_images(self) -> bool:
        return True

    async def aclose(self) -> None:
        return None

    async def complete(self, request: ModelRequest) -> ModelResponse:
        tools = [t.Tool(name=s.name, description=s.description, input_schema=dict(s.parameters)) for s in request.tools]
        params = t.CreateMessageRequestParams(
            messages=_messages(request.messages),
            max_tokens=request.max_output_tokens or DEFAULT_MAX_OUTPUT_TOKENS,  # sampling has no default
            system_prompt=request.system,
            tools=tools,
            tool_choice=t.ToolChoice(mode=request.tool_choice),
        )
        try:
            result = await self._send(params)
        except MCPError as exc:
            raise ProviderError(f"sampling: the host did not answer the model request: {exc.message}") from None
        except ValidationError as exc:  # the SDK checks the host's answer against the protocol's result type
            raise ProviderError(f"sampling: the host's answer was malformed: {refusal(exc)}") from None
        if not isinstance(result, t.CreateMessageResult | t.CreateMessageResultWithTools):
            raise ProviderError("sampling: the host gave no completion for the model request")
        blocks = result.content if isinstance(result.content, list) else [result.content]
        text = "\n".join(b.text for b in blocks if isinstance(b, t.TextContent))
        calls = tuple(
            ToolCall(id=b.id, name=b.name, arguments=b.input) for b in blocks if isinstance(b, t.ToolUseContent)
        )
        stop = result.stop_reason
        return ModelResponse(
            text=text, tool_calls=calls, model=result.model, finish_reasons=(stop,) if isinstance(stop, str) else ()
        )


def _messages(messages: tuple[Message, ...]) -> list[t.SamplingMessage]:
    out: list[t.SamplingMessage] = []
    for message in messages:
        match message:
            case SystemMessage(text=text):
                out.append(t.SamplingMessage(role="user", content=[t.TextContent(type="text", text=text)]))
            case UserMessage(parts=parts):
                out.append(t.SamplingMessage(role="user", content=[_block(p) for p in parts]))
            case AssistantMessage(text=text, tool_calls=calls):
                content: list[Any] = [t.TextContent(type="text", text=text)] if text else []
                content.extend(
                    t.ToolUseContent(type="tool_use", id=c.id, name=c.name, input=dict(c.arguments)) for c in calls
                )
                out.append(t.SamplingMessage(role="assistant", content=content))
            case ToolMessage(results=results):
                out.append(
                    t.SamplingMessage(
                        role="user",
                        content=[
                            t.ToolResultContent(
                                type="tool_result",
                                tool_use_id=r.call_id,
                                content=[_block(p) for p in r.parts],
                                is_error=r.is_error,
                            )
                            for r in results
                        ],
                    )
                )
    return out


def _block(part: TextPart | ImagePart) -> t.TextContent | t.ImageContent:
    if isinstance(part, TextPart):
        return t.TextContent(type="text", text=part.text)
    return t.ImageContent(type="image", data=part.data, mime_type=part.mime_type)
