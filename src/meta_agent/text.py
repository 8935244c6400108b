"""Text as one line: what a progress message, an account of a run or an error quotes of a longer text."""

from __future__ import annotations


def one_line(text: str, limit: int) -> str:
    """`text` on one line (every run of white space one space), cut with an ellipsis past `limit` characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else f"{line[: limit - 1]}…"
