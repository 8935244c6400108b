"""A host's config file as text: read as JSON (or as JSON with comments and trailing commas, where the host reads its
file so), with the place of each member of the top-level object and of the object one level down, so that an entry
can be set or removed by changing those characters only. Everything else stays as the user wrote it, byte for byte:
other entries, unknown keys, comments, indentation, line endings.

The values are json's own: comments and trailing commas are blanked out (each character a space, so a position in an
error is the file's) and the rest goes to `json.loads`, which is what decides what is valid.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# Nesting deeper than this is refused before json or the scanner recurse into it: no host file is anywhere near it.
MAX_DEPTH = 200
_PUNCTUATION = "{}[]:,"
# A string, with its escapes; a bare word (a number, true, false, null, or an error json.loads will name).
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_WORD = re.compile(r"[^\s{}\[\]:,\"/]+")
_NOT_LINE_BREAK = re.compile(r"[^\r\n]")


class JsonTextError(ValueError):
    """The text is not JSON (or not JSON with comments, where those are allowed); the message says where."""


@dataclass(frozen=True, kw_only=True)
class Member:
    """One `"key": value` of an object, by position: `start` is the key's opening quote, the value is
    `text[value_start:value_end]`, and `comma` the separator after it (None for the last member, or its trailing
    comma where comments are allowed). `members` are the value's own when it is an object."""

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


@dataclass(frozen=True)
class _Token:
    kind: str  # one of _PUNCTUATION, "string", "word", "comment"
    start: int
    end: int


def parse(text: str, *, comments: bool) -> Document:
    """Parse `text`, a JSON object (with comments and trailing commas if `comments`).

    Raises:
        JsonTextError: what is wrong and where (line and column), in one line.
    """
    tokens = list(_scan(text))
    found = [token for token in tokens if token.kind == "comment"]
    if found and not comments:
        raise JsonTextError(f"a comment at {_where(text, found[0].start)}, which this file may not have")
    significant = [token for token in tokens if token.kind != "comment"]
    if not significant or significant[0].kind != "{":
        raise JsonTextError("expected a JSON object ({...}) as the whole file")
    parser = _Parser(text, significant, trailing_commas=comments)
    root = parser.object(0, depth=1)
    if parser.next < len(significant):
        raise JsonTextError(f"more after the object's closing brace, at {_where(text, significant[parser.next].start)}")
    if parser.trailing and not comments:
        raise JsonTextError(f"a trailing comma at {_where(text, parser.trailing[0])}")
    blank = _blanked(text, [(t.start, t.end) for t in found] + [(at, at + 1) for at in parser.trailing])
    try:
        value = json.loads(blank, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise JsonTextError(f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    return Document(text=text, value=value, root=root)


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose key appears twice would lose one of its values in a rewrite (the host keeps only one)."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise JsonTextError(f"the key {key!r} appears twice in one object (a host reads only one of them)")
        seen[key] = value
    return seen


def _scan(text: str) -> Iterator[_Token]:
    at = 0
    while at < len(text):
        char = text[at]
        if char.isspace():
            at += 1
        elif char in _PUNCTUATION:
            yield _Token(char, at, at + 1)
            at += 1
        elif char == '"':
            match = _STRING.match(text, at)
            if match is None:
                raise JsonTextError(f"a string that does not end on its line, at {_where(text, at)}")
            yield _Token("string", at, match.end())
            at = match.end()
        elif text.startswith("//", at):
            end = text.find("\n", at)
            end = len(text) if end < 0 else end
            yield _Token("comment", at, end)
            at = end
        elif text.startswith("/*", at):
            end = text.find("*/", at + 2)
            if end < 0:
                raise JsonTextError(f"a comment that is never closed, at {_where(text, at)}")
            yield _Token("comment", at, end + 2)
            at = end + 2
        else:
            match = _WORD.match(text, at)
            if match is None:  # a lone `/`
                raise JsonTextError(f"unexpected {char!r} at {_where(text, at)}")
            yield _Token("word", at, match.end())
            at = match.end()


class _Parser:
    """Finds the members of the top-level object and of the objects one level down; skips deeper values by their
    brackets. What it accepts may still be refused by json.loads (a bad number, an escape): that is the judge."""

    def __init__(self, text: str, tokens: list[_Token], *, trailing_commas: bool) -> None:
        self.text = text
        self.tokens = tokens
        self.next = 0
        self.trailing: list[int] = []  # positions of trailing commas
        self._trailing_commas = trailing_commas

    def _take(self, *kinds: str) -> _Token:
        if self.next >= len(self.tokens):
            raise JsonTextError("the file ends before its object does")
        token = self.tokens[self.next]
        if token.kind not in kinds:
            wanted = " or ".join(repr(kind) if kind in _PUNCTUATION else f"a {kind}" for kind in kinds)
            found = self.text[token.start : token.end][:20]
            raise JsonTextError(f"expected {wanted} at {_where(self.text, token.start)}, found {found!r}")
        self.next += 1
        return token

    def _peek(self) -> str | None:
        return self.tokens[self.next].kind if self.next < len(self.tokens) else None

    def object(self, level: int, depth: int) -> Object:
        opening = self._take("{")
        members: list[Member] = []
        while self._peek() != "}":
            key = self._take("string")
            self._take(":")
            value_start = self.tokens[self.next].start if self.next < len(self.tokens) else len(self.text)
            inner = self._value(level + 1, depth + 1)
            value_end = self.tokens[self.next - 1].end
            comma = self._take(",").start if self._peek() == "," else None
            members.append(
                Member(
                    key=json.loads(self.text[key.start : key.end]),
                    start=key.start,
                    value_start=value_start,
                    value_end=value_end,
                    comma=comma,
                    members=inner,
                )
            )
            if comma is None:
                break
            if self._peek() == "}":
                self.trailing.append(comma)
        closing = self._take("}")
        return Object(opening=opening.start, closing=closing.start, members=tuple(members))

    def _value(self, level: int, depth: int) -> Object | None:
        """Consume one value; its members if it is an object at a level that is looked into (the first two)."""
        if depth > MAX_DEPTH:
            raise JsonTextError(f"nested deeper than {MAX_DEPTH} levels")
        kind = self._peek()
        if kind == "{" and level <= 1:
            return self.object(level, depth)
        if kind in ("{", "["):
            self._skip_container(depth)
            return None
        self._take("string", "word")
        return None

    def _skip_container(self, depth: int) -> None:
        opening = self._take("{", "[")
        closing = "}" if opening.kind == "{" else "]"
        while self._peek() != closing:
            if self._peek() in ("{", "["):
                if depth + 1 > MAX_DEPTH:
                    raise JsonTextError(f"nested deeper than {MAX_DEPTH} levels")
                self._skip_container(depth + 1)
            else:
                token = self._take("string", "word", ":", ",")
                if token.kind == "," and self._peek() == closing:
                    self.trailing.append(token.start)
        self._take(closing)


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
