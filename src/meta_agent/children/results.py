"""A child's tool result as the model reads it: each content block as a transcript part, then the structured content
as one part more only where the blocks do not already say it.

Servers built on the MCP SDKs send most results twice: a `str` return as its text and `{"result": text}`, an object as
its JSON dump and itself, a list as a block per item and `{"result": [items]}`, and (FastMCP of SDK 1.x, so
postgres-mcp) a list of content blocks as those blocks and `{"result": [the blocks as JSON]}`. Shown both, the model
reads every such result twice, at every later turn of the run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, assert_never

import mcp.types as t

from meta_agent.core.messages import ImagePart, Part, TextPart
from meta_agent.core.tools import ToolOutcome

# What a text block says when it is not JSON (or JSON nested deeper than Python parses).
_NOT_JSON = object()


def outcome_of(result: t.CallToolResult) -> ToolOutcome:
    """An MCP tool result as transcript parts: text and images as they are, everything else described in text."""
    parts: list[Part] = [_part(block) for block in result.content]
    structured = result.structured_content
    if structured is not None and not says_the_same(result.content, structured):
        parts.append(TextPart(text=f"structured content: {json.dumps(structured)}"))
    return ToolOutcome(
        parts=tuple(parts) or (TextPart(text="(no output)"),), is_error=bool(result.is_error), structured=structured
    )


def says_the_same(blocks: Sequence[t.ContentBlock], structured: dict[str, Any]) -> bool:
    """Whether `structured` is data the content `blocks` carry already: it, or the value of its lone `result` key
    (how the SDKs wrap what is not an object), is the blocks themselves as JSON, what a text block says (as it is, or
    as JSON), or a list whose items the blocks say one each, in order."""
    values: list[Any] = [structured]
    if list(structured) == ["result"]:
        values.append(structured["result"])
    texts = [block.text for block in blocks if isinstance(block, t.TextContent)]
    said = [_parsed(text) for text in texts]
    for value in values:
        if any(_says(text, parsed, value) for text, parsed in zip(texts, said, strict=True)):
            return True
        if isinstance(value, list) and len(value) == len(blocks):
            if len(texts) == len(blocks) and all(map(_says, texts, said, value)):
                return True
            if _without_nulls(value) == [_dumped(block) for block in blocks]:
                return True
    return False


def _says(text: str, parsed: Any, value: Any) -> bool:
    """Whether a text block (`parsed`: its JSON) says `value`."""
    if isinstance(value, str) and text == value:
        return True
    return parsed is not _NOT_JSON and bool(parsed == value)


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return _NOT_JSON


def _dumped(block: t.ContentBlock) -> Any:
    return block.model_dump(mode="json", by_alias=True, exclude_none=True)


def _without_nulls(value: Any) -> Any:
    """`value` without the null members of its objects, as `_dumped` leaves them out (SDK 1.x writes them). The
    structured content is parsed JSON, which the SDK's parser bounds in depth well within Python's recursion."""
    if isinstance(value, dict):
        return {key: _without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return value


def _part(block: t.ContentBlock) -> Part:
    if isinstance(block, t.TextContent):
        return TextPart(text=block.text)
    if isinstance(block, t.ImageContent):
        return ImagePart(data=block.data, mime_type=block.mime_type)
    if isinstance(block, t.AudioContent):
        return TextPart(text=f"[audio: {block.mime_type}, {len(block.data) * 3 // 4} bytes, not shown]")
    if isinstance(block, t.ResourceLink):
        about = ", ".join(filter(None, (block.mime_type, block.description)))
        return TextPart(text=f"[resource link: {block.name} <{block.uri}>{f' ({about})' if about else ''}]")
    if isinstance(block, t.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, t.TextResourceContents):
            return TextPart(text=f"[resource <{resource.uri}>]\n{resource.text}")
        size = len(resource.blob) * 3 // 4
        return TextPart(text=f"[resource <{resource.uri}>: {resource.mime_type or 'binary'}, {size} bytes, not shown]")
    assert_never(block)  # the SDK parses a child's content into one of the types above, or fails the call
