"""No single value of a trace record is stored longer than `MAX_VALUE_BYTES` (README, Traces, logs and metrics): a
longer string (a tool call's argument of 100 MB, an image's base64) is cut to its head and a marker giving its whole
length.

What the trace cuts is the trace's own: a result kept whole for `read_result` stays whole in the run that keeps it
(core/tool_step.py), whatever its trace holds. The writer thread runs this before encoding a record, so a huge value
is never encoded whole just to be measured, nor looked at on the event loop.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from meta_agent.core.messages import jsonable

MAX_VALUE_BYTES = 1_000_000  # the README's 1 MB: a run's trace grows with its steps, not with what it is sent
# A string this short is within the bound however it is encoded: JSON spends at most 6 bytes on a character (the
# \u0000 escapes of control characters; a lone surrogate, written as its escape).
SURELY_SHORT = MAX_VALUE_BYTES // 6
# A cut value is redacted this far past the cut first, so that a secret the cut would split is hidden whole.
_MARGIN = 4096
_ATOMS = (int, float, bool, type(None))

Redact = Callable[[str], str]


def oversized(value: Any) -> bool:
    """Whether `value` (a record as `json.dumps(default=jsonable)` encodes it) holds a string that may exceed the
    bound. Level by level, without recursion: the common case, a record of short values, costs one look at each."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str:
            if len(item) > SURELY_SHORT:
                return True
        elif kind is dict:
            stack.extend(item)  # keys: a model may send a long one
            stack.extend(item.values())
        elif kind is tuple or kind is list:
            stack.extend(item)
        elif kind in _ATOMS:
            continue
        elif hasattr(kind, "__dataclass_fields__"):
            stack.extend(vars(item).values())
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False


def bounded(value: Any, redact: Redact) -> Any:
    """`value` as plain JSON values, each string over the bound cut (see `cut`). Only for an `oversized` record:
    it copies the whole value.

    Raises:
        RecursionError: `value` nests deeper than Python recurses (so does json.dumps).
    """
    kind = type(value)
    if kind is str:
        return cut(value, redact) if len(value) > SURELY_SHORT else value
    if kind in _ATOMS:
        return value
    if hasattr(kind, "__dataclass_fields__"):
        value = vars(value)
    if isinstance(value, Mapping):
        return {bounded(key, redact): bounded(item, redact) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [bounded(item, redact) for item in value]
    return value  # encoded by `default`, which bounds what it makes of it


def default(value: Any) -> Any:
    """The `default` of json.dumps for trace records: `jsonable`, with a long text made of a value cut too (the
    line's redaction follows)."""
    made = jsonable(value)
    return cut(made, str) if type(made) is str and len(made) > SURELY_SHORT else made


def cut(text: str, redact: Redact) -> str:
    """`text`, redacted, as the trace stores it: whole if its JSON form fits the bound, else the head that fits and
    a marker saying how long the whole was ("... [cut: 5,000,000 characters in all]")."""
    head = redact(text[: MAX_VALUE_BYTES + _MARGIN])
    if len(text) <= MAX_VALUE_BYTES + _MARGIN and stored_size(head) <= MAX_VALUE_BYTES:
        return head
    marker = f" [cut: {len(text):,} characters in all]"
    budget = MAX_VALUE_BYTES - len(marker)
    keep = min(len(head), budget)
    while (size := stored_size(head[:keep])) > budget:  # characters that take more than a byte: keep fewer
        keep = max(0, keep * budget // size - 1)
    return head[:keep] + marker


def stored_size(text: str) -> int:
    """The bytes `text` takes in a trace line, its quotes left out."""
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8", "backslashreplace")) - 2
