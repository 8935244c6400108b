"""core/event_lines.py: the one-line view of a tool call's arguments, whatever their size or shape."""

from __future__ import annotations

import json
from typing import Any

import pytest

from meta_agent.core import events as ev
from meta_agent.core.event_lines import ARGUMENTS_SHOWN, ERROR_SHOWN, arguments_line, describe
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


@pytest.mark.parametrize(
    ("text", "limit", "line"),
    [
        ("short enough", 20, "short enough"),
        ("set it in servers.json or run `meta-agent trust f.x always`", 30, "set it in servers.json or run…"),
        ("a b c " + "x" * 40, 20, "a b c xxxxxxxxxxxxx…"),  # no word ends in the second half: cut mid-word
        ("allowed, denied; asked: again", 26, "allowed, denied; asked…"),  # no stop left before the ellipsis
    ],
)
def test_a_line_cut_at_a_word(text: str, limit: int, line: str) -> None:
    assert one_line(text, limit, at_a_word=True) == line
    assert len(line) <= limit


def test_a_tool_error_line_keeps_its_fix_and_ends_on_a_whole_word() -> None:
    """A refusal names its fix last (`--allow f.append`): the step line has room for it; a longer error is cut after a
    whole word, never inside one."""
    fix = "run again with `--allow f.append` to allow it, or record `meta-agent trust f.append always`"
    refusal = (
        f"the user did not allow f.append (nobody to ask, not on a terminal; {fix}); do without it, or ask the user"
    )
    line = describe(ev.ToolCallFinished(step=1, call_id="c", name="f.append", ok=False, duration_ms=3, error=refusal))
    assert line == f"step 1 · f.append error (3 ms): {refusal}"
    words = " ".join(f"word{n}" for n in range(200))
    line = describe(ev.ToolCallFinished(step=1, call_id="c", name="f.x", ok=False, duration_ms=3, error=words))
    assert line is not None and line.endswith("…")
    assert line.removesuffix("…").split()[-1] in words.split()  # the last word shown is whole
    assert len(line) <= len("step 1 · f.x error (3 ms): ") + ERROR_SHOWN
