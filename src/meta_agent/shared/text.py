"""Small text helpers shared by every layer: a longer text quoted on one line, an error message's first line, a few
names of a longer list, and a count with its noun."""

from __future__ import annotations

from collections.abc import Sequence


def one_line(text: str, limit: int | None = None, *, at_a_word: bool = False) -> str:
    """`text` on one line (every run of white space one space), cut with an ellipsis past `limit` characters (None:
    never cut); `at_a_word`: cut after the last whole word that fits, where one ends in the second half of the line
    (a sentence cut mid-word reads as a typo), else mid-word as without it."""
    line = " ".join(text.split())
    if limit is None or len(line) <= limit:
        return line
    head = line[: limit - 1]
    if at_a_word:
        if line[limit - 1] != " " and (space := head.rfind(" ", limit // 2)) > 0:  # the cut is inside a word
            head = head[:space]
        head = head.rstrip(",;: ")
    return f"{head}…"


def printable(text: str) -> str:
    """`text` with its control characters (a terminal's escape sequences, line breaks) written as escapes (`\\x1b`,
    `\\n`), so what a trace holds cannot move a terminal's cursor or split a line."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else char.encode("unicode_escape").decode("ascii") for char in text)


def first_line(text: str) -> str:
    """The first line of `text` that is not blank, stripped ("" if none): where an error message puts its gist, before
    the detail (a schema, a traceback)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def plural(count: int, noun: str) -> str:
    """`count` with its noun: "1 step", "3 steps" (a regular plural, which is every noun we count)."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def some_of(names: Sequence[str], shown: int) -> str:
    """The first `shown` of `names`, joined by ", ", and ", …" when there are more: a list named in a one-line
    message, kept short."""
    return ", ".join(names[:shown]) + (", …" if len(names) > shown else "")
