"""A host's config file as text: read as JSON (or as JSON with comments and trailing commas, where the host reads its
file so), with the place of each member of the top-level object and of the objects one level down, so that an entry
can be set or removed by changing those characters only. Everything else stays as the user wrote it, byte for byte:
other entries, unknown keys, comments, indentation, line endings.

json's own parser decides what is valid and gives the values. Where comments are allowed, a scan first finds them
and the trailing commas, and blanks them out (each character a space, its line breaks kept), so that positions in the
blanked text, and in json's errors, are the file's. The places of the members are then found in that text, each value
skipped by json's decoder: a file of megabytes (Claude Code's) is read in a fraction of a second.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# One token of JSON with comments: blanks before it, then a punctuation mark, a string, a comment or a bare word (a
# number, true, false, null, or something json will name as wrong).
_TOKEN = re.compile(
    r'\s*(?:(?P<mark>[{}\[\]:,])|(?P<string>"(?:[^"\\\n]|\\.)*")|(?P<comment>//[^\n]*|/\*.*?\*/)'
    r'|(?P<word>[^\s{}\[\]:,"/]+))',
    re.DOTALL,
)
_BLANKS = re.compile(r"[ \t\r\n]*")
_NOT_LINE_BREAK = re.compile(r"[^\r\n]")
_DECODER = json.JSONDecoder()


class JsonTextError(ValueError):
    """The text is not JSON (or not JSON with comments, where those are allowed); the message says where."""


@dataclass(frozen=True, kw_only=True)
class Member:
    """One `"key": value` of an object, by position: `start` is the key's opening quote, the value is
    `text[value_start:value_end]`, and `comma` the separator after it (None for the last member; its trailing comma
    where those are allowed). `members` are the value's own when it is an object of the top-level one."""

    key: str
    start: int
    value_start: int
    value_end: int
    comma: int | None
    members: Object | None


@dataclass(frozen=True, kw_only=True)
class Object:
    """An object's braces (`text[opening]` is `{`, `text[closing]` is `}`) and its members in order."""

    opening: int
    closing: int
    members: tuple[Member, ...]

    def get(self, key: str) -> Member | None:
        return next((member for member in self.members if member.key == key), None)


@dataclass(frozen=True, kw_only=True)
class Document:
    """A parsed file: its text, its value, and the top-level object's members by position."""

    text: str
    value: dict[str, Any]
    root: Object


def parse(text: str, *, comments: bool) -> Document:
    """Parse `text`, a JSON object (with comments and trailing commas if `comments`).

    Raises:
        JsonTextError: what is wrong and where (line and column), in one line.
    """
    blanked = list(_comments_and_trailing_commas(text)) if comments else []
    plain = _blanked(text, blanked)
    try:
        value = json.loads(plain, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as exc:
        if not comments:  # say so where what json refused is a comment or a trailing comma
            for start, _ in _comments_and_trailing_commas(text):
                kind = "a trailing comma" if text[start] == "," else "a comment"
                raise JsonTextError(f"{kind} at {_where(text, start)}, which this file may not have") from None
        raise JsonTextError(f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise JsonTextError("nested too deeply") from None
    if not isinstance(value, dict):
        raise JsonTextError("expected a JSON object ({...}) as the whole file")
    trailing = sorted(start for start, _ in blanked if text[start] == ",")
    root, _ = _object(plain, _blanks(plain, 0), trailing, outer=True)
    return Document(text=text, value=value, root=root)


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose key appears twice would lose one of its values in a rewrite (the host keeps only one)."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise JsonTextError(f"the key {key!r} appears twice in one object (a host reads only one of them)")
        seen[key] = value
    return seen


def _comments_and_trailing_commas(text: str) -> Iterator[tuple[int, int]]:
    """The spans of the comments and of the trailing commas (those followed by `}` or `]`) of `text`.

    Raises:
        JsonTextError: a string or a comment that does not end, a character no token begins with.
    """
    at, comma = 0, None  # comma: the last comma, until a token other than a comment follows it
    while at < len(text):
        match = _TOKEN.match(text, at)
        if match is None or match.lastgroup is None:
            at = _blanks(text, at)
            if at < len(text):
                raise JsonTextError(_why_no_token(text, at))
            return
        start = match.start(match.lastgroup)
        if match.lastgroup == "comment":
            yield start, match.end()
        elif comma is not None and text[start] in "}]":
            yield comma, comma + 1
        comma = start if text[start] == "," else comma if match.lastgroup == "comment" else None
        at = match.end()


def _why_no_token(text: str, at: int) -> str:
    if text[at] == '"':
        return f"a string that does not end on its line, at {_where(text, at)}"
    if text.startswith("/*", at):
        return f"a comment that is never closed, at {_where(text, at)}"
    return f"unexpected {text[at]!r} at {_where(text, at)}"


def _object(text: str, at: int, trailing: list[int], *, outer: bool) -> tuple[Object, int]:
    """The object at `text[at]` (valid JSON: json.loads read it) with its members' places, and where it ends; the
    members of its members that are objects too, if it is the `outer` one. `trailing`: where the file has trailing
    commas, which `text` has blanked out."""
    opening = at
    at = _blanks(text, at + 1)
    members: list[Member] = []
    while text[at] != "}":
        start = at
        key, at = _DECODER.raw_decode(text, at)
        value_start = _blanks(text, _blanks(text, at) + 1)  # past the colon
        if outer and text[value_start] == "{":
            inner, value_end = _object(text, value_start, trailing, outer=False)
        else:
            inner, value_end = None, _DECODER.raw_decode(text, value_start)[1]
        at = _blanks(text, value_end)
        comma = at if text[at] == "," else next((c for c in trailing if value_end <= c < at), None)
        members.append(
            Member(key=key, start=start, value_start=value_start, value_end=value_end, comma=comma, members=inner)
        )
        if comma is None:
            break
        if text[comma] == ",":  # else a trailing comma, blanked: `at` is at the closing brace
            at = _blanks(text, comma + 1)
    return Object(opening=opening, closing=at, members=tuple(members)), at + 1


def _blanks(text: str, at: int) -> int:
    """Where the blanks from `at` on end."""
    match = _BLANKS.match(text, at)
    assert match is not None  # `*` matches nothing too
    return match.end()


def _blanked(text: str, spans: list[tuple[int, int]]) -> str:
    """`text` with each span made spaces (its line breaks kept), so that positions stay the same."""
    pieces, at = [], 0
    for start, end in sorted(spans):
        pieces += [text[at:start], _NOT_LINE_BREAK.sub(" ", text[start:end])]
        at = end
    pieces.append(text[at:])
    return "".join(pieces)


def _where(text: str, at: int) -> str:
    line = text.count("\n", 0, at) + 1
    column = at - (text.rfind("\n", 0, at) + 1) + 1
    return f"line {line} column {column}"
