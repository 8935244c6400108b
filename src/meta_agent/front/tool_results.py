"""What our MCP tools return to a host: a run's answer with its structured result, and a tool error of one line.

The structured result's shape is defined once, by the loop's own `RunResult` (meta_agent.core.result): it is the
output model of `ask`, `plan` and `agent`, from which the SDK derives their output schema.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

import mcp.types as t
from pydantic import BaseModel, GetCoreSchemaHandler
from pydantic_core import CoreSchema

from meta_agent.core.messages import ImagePart, Part
from meta_agent.core.result import RunResult, run_result_of, unavailable_line
from meta_agent.core.result_images import MAX_RESULT_IMAGE_CHARS, MAX_RESULT_IMAGES
from meta_agent.front.instructions import CONFIG_UNUSABLE
from meta_agent.store.run_index import RunState

NOT_REMEMBERED = "Not saved in a conversation (conversation_id is null): "  # leads conversation_error in the text
# Leads the line naming the servers a run could have used that were not ready (unavailable_servers).
NOT_READY = "Servers not ready, their tools left out of this run: "
NOT_CARRIED = "Images of this run left out of this result: "  # leads the line of `images_left_out`


class StructuredResult(BaseModel):
    """RunResult as the SDK's output model. The SDK takes a pydantic model as it is, but remakes any other class
    from its bare type hints, which would lose what each field's `Field` says (descriptions, fields never sent, empty
    ones left out): this model is RunResult's own schema, for the output schema and the check of each result."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler, /) -> CoreSchema:
        return handler(RunResult)


# What ask/plan/agent return: a result whose structured content is a RunResult's JSON (the SDK checks it against
# RunResult, whose schema it advertises), or (2026-07-28) a question for the user.
RunAnswer = Annotated[t.CallToolResult, StructuredResult] | t.InputRequiredResult


def run_result(result: RunResult) -> t.CallToolResult:
    """A finished run: its answer and images as content, and its structured result. The one definition of a result's
    content, on the replica that ran it as on any other that reads it back (`stored_result`)."""
    content: list[t.ContentBlock] = [t.TextContent(type="text", text=result.answer)]
    content.extend(content_block(image) for image in result.images)
    if result.images_left_out:  # the images stand, but not every one the run made
        content.append(t.TextContent(type="text", text=images_left_out(result.images_left_out)))
    if result.conversation_error:  # the answer stands, but a caller must not believe the turn is remembered
        content.append(t.TextContent(type="text", text=f"{NOT_REMEMBERED}{result.conversation_error}"))
    if result.unavailable_servers:  # the answer stands, made with fewer tools than the caller may think
        content.append(t.TextContent(type="text", text=f"{NOT_READY}{unavailable_line(result.unavailable_servers)}"))
    return t.CallToolResult(content=content, structured_content=result.to_json())


def stored_result(run: RunState) -> t.CallToolResult:
    """A finished run's result as the run index keeps it (its structured result, and its images where they were read
    with it): what `run_result` made of it on the replica that ran it."""
    data = run.result or {}
    try:
        result = run_result_of(data)
    except ValueError:  # a row written by another version of meta-agent: its structured result as it is
        return t.CallToolResult(
            content=[t.TextContent(type="text", text=str(data.get("answer", "")))], structured_content=dict(data)
        )
    return run_result(replace(result, images=run.images, images_left_out=run.images_left_out))


def images_left_out(count: int) -> str:
    """The line that tells a host how many images of the run its result does not carry, and why."""
    return (
        f"{NOT_CARRIED}{count} (a result carries at most {MAX_RESULT_IMAGES} images and"
        f" {MAX_RESULT_IMAGE_CHARS // 2**20} MiB of their base64, kept as long as the run's trace)"
    )


def run_failed(message: str, failed: list[RunResult]) -> t.CallToolResult:
    """A one-line tool error; where a run had started, it names the run (its trace) and carries its structured result
    with stop reason `error` (neither era checks an error's structured result against the output schema)."""
    if not failed:
        return tool_error(message)
    result = failed[-1]
    return t.CallToolResult(
        content=[t.TextContent(type="text", text=f"{message} (run_id {result.run_id})")],
        structured_content=result.to_json(),
        is_error=True,
    )


def with_config_problem(result: t.CallToolResult, problem: str | None) -> t.CallToolResult:
    """`result`, with a last line saying why servers.json cannot be used while it cannot (`problem`): the person reads
    it in the host, whose run had fewer servers than the file names."""
    if problem is None:
        return result
    line = t.TextContent(type="text", text=f"{CONFIG_UNUSABLE}{problem}")
    return result.model_copy(update={"content": [*result.content, line]})


def tool_error(message: str) -> t.CallToolResult:
    """A tool error whose text is `message`."""
    return t.CallToolResult(content=[t.TextContent(type="text", text=message)], is_error=True)


def content_block(part: Part) -> t.ContentBlock:
    """A part of the neutral transcript as MCP content."""
    if isinstance(part, ImagePart):
        return t.ImageContent(type="image", data=part.data, mime_type=part.mime_type)
    return t.TextContent(type="text", text=part.text)
