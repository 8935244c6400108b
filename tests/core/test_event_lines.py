"""core/event_lines.py: the one-line view of a tool call's arguments, whatever their size or shape."""

from __future__ import annotations

import json
from typing import Any

import pytest

from meta_agent.core.event_lines import ARGUMENTS_SHOWN, arguments_line
from meta_agent.shared.text import one_line

pytestmark = pytest.mark.quick


def whole_line(arguments: dict[str, Any], limit: int) -> str:
    """What the line would be if the arguments were written out whole first."""
    return one_line(json.dumps(arguments, ensure_ascii=False, default=str), limit)


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"timezone": "Asia/Tokyo"},
        {"query": "é" * 500, "n": 3, "deep": {"list": [1, 2.5, None, True, {"k": "v"}]}},
        {"image": "data:image/png;base64," + "QUJD" * 50_000},
        {"rows": [{"id": n, "name": f"row {n}"} for n in range(5_000)]},
        {f"key{n}": n for n in range(2_000)},
        {"text": 'quotes " and \\ back\\slashes and \u2028 separators ' * 20},
    ],
)
@pytest.mark.parametrize("limit", [20, ARGUMENTS_SHOWN])
def test_the_line_is_the_head_of_the_whole_arguments(arguments: dict[str, Any], limit: int) -> None:
    line = arguments_line(arguments, limit)
    assert line == whole_line(arguments, limit)
    assert len(line) <= limit


def test_arguments_nested_past_what_json_can_write_still_make_a_line() -> None:
    nested: dict[str, Any] = {}
    inner = nested
    for _ in range(100_000):  # deeper than json.dumps can go (RecursionError)
        inner["x"] = {}
        inner = inner["x"]
    line = arguments_line(nested, ARGUMENTS_SHOWN)
    assert line.startswith('{"x": {"x": ') and line.endswith("}")
    assert len(line) <= ARGUMENTS_SHOWN
