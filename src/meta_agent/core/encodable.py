"""A model's response made encodable as UTF-8: a lone surrogate in its text becomes U+FFFD.

A provider's SDK decodes the JSON it is answered with as Python does, so a model (or a hostile endpoint) writing
`"\\ud800"` gives a string holding a lone surrogate, which no UTF-8 encodes. Kept as it is, it would be in the
answer, the progress, the transcript and the next request to the model: each of those writes fails on it (an MCP
answer over HTTP is never sent, the next model turn cannot be requested). So the loop takes every response through
`encodable` as it comes. A text that is ASCII, nearly every one, is looked at in constant time.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

from meta_agent.core.messages import ModelResponse

_SURROGATE = re.compile("[\ud800-\udfff]")


def encodable(response: ModelResponse) -> ModelResponse:
    """`response` with each lone surrogate of its text, reasoning and tool calls (names, ids, arguments) U+FFFD; the
    same object where it has none."""
    if not _any_surrogate([response.text, *(part.text for part in response.thinking), *response.tool_calls]):
        return response
    calls = tuple(
        dataclasses.replace(call, id=_text(call.id), name=_text(call.name), arguments=_value(call.arguments))
        if _any_surrogate([call])
        else call
        for call in response.tool_calls
    )
    thinking = tuple(dataclasses.replace(part, text=_text(part.text)) for part in response.thinking)
    return dataclasses.replace(response, text=_text(response.text), thinking=thinking, tool_calls=calls)


def _text(text: str) -> str:
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


def _value(value: Mapping[str, Any]) -> Mapping[str, Any]:
    """Arguments without lone surrogates: through JSON, as they came (a deep value is walked in C, as it was parsed)."""
    loaded: Mapping[str, Any] = json.loads(_SURROGATE.sub("\ufffd", json.dumps(value, ensure_ascii=False)))
    return loaded


def _any_surrogate(values: list[Any]) -> bool:
    """Whether a string among `values` (or in a tool call's id, name or arguments, keys included) holds a surrogate.
    Without recursion: a value of any depth is looked at safely."""
    pending = list(values)
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if not item.isascii() and _SURROGATE.search(item):
                return True
        elif isinstance(item, Mapping):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):  # a tool call
            pending.extend([item.id, item.name, item.arguments])  # type: ignore[attr-defined]
    return False
