"""A model that answers at once, in-process: it calls the tool the task names with the task's text, then answers
with what the tool returned. Benchmarks use it to measure meta-agent itself, not a model."""

from __future__ import annotations

from meta_agent import ModelRequest, ModelResponse, TextPart, ToolCall, ToolMessage


class InstantModel:
    """A `Provider`. The task is "TOOL_ALIAS TEXT", e.g. "echo__echo hello"."""

    name = "instant"
    accepts_images = False

    async def complete(self, request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if isinstance(last, ToolMessage):
            return ModelResponse(text=" ".join(p.text for p in last.results[0].parts if isinstance(p, TextPart)))
        task = request.messages[0].parts[0].text  # type: ignore[union-attr]
        alias, _, text = task.partition(" ")
        return ModelResponse(
            tool_calls=(ToolCall(id=f"c{len(request.messages)}", name=alias, arguments={"text": text}),)
        )

    async def aclose(self) -> None:
        return None
