"""One entry of a host's servers map set or removed in the file's own text, changing the characters of that entry only
(and a comma): the rest of the file stays byte for byte as it was. The new member follows the file's own layout: its
indentation, its line breaks, one member a line or all on one line. `checked` parses the result again and holds it
to the values intended, so a mistake here refuses the change instead of writing it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from meta_agent.hosts.jsonc import Document, JsonTextError, Member, Object, parse

DEFAULT_INDENT = "  "
# What may follow a value on its line for a new member to go on the next line: blanks and comments.
_REST_OF_LINE = re.compile(r"[ \t]*(?:(?://[^\r\n]*|/\*(?:(?!\*/)[^\r\n])*\*/)[ \t]*)*(?=\r?\n)")
_INDENTED_LINE = re.compile(r"\n([ \t]+)\S")


def fresh(key: str, name: str, entry: dict[str, Any]) -> str:
    """A new file holding only the servers map with the one entry."""
    return json.dumps({key: {name: entry}}, indent=DEFAULT_INDENT, ensure_ascii=False) + "\n"


def with_entry(document: Document, key: str, name: str, entry: dict[str, Any]) -> str:
    """The text of `document` with `entry` as `name` in its servers map `key` (replacing the value of that name, if
    any; adding the map, if there is none). The map, if present, is an object (the caller checked)."""
    text = document.text
    servers = document.root.get(key)
    if servers is None:
        return _inserted(text, document.root, key, {name: entry})
    assert servers.members is not None  # an object: checked by the caller
    existing = servers.members.get(name)
    if existing is None:
        return _inserted(text, servers.members, name, entry)
    rendered = _rendered(text, entry, _line_indent(text, existing.start), inline=not _alone(text, existing.start))
    return text[: existing.value_start] + rendered + text[existing.value_end :]


def without_entry(document: Document, key: str, name: str) -> str:
    """The text of `document` without `name` in its servers map `key` (whose member the caller found)."""
    servers = document.root.get(key)
    assert servers is not None and servers.members is not None
    members = servers.members.members
    member = next(m for m in members if m.key == name)
    text = document.text
    index = members.index(member)
    end = member.comma + 1 if member.comma is not None else member.value_end
    braces = servers.members
    if len(members) == 1 and not (text[braces.opening + 1 : member.start] + text[end : braces.closing]).strip():
        return text[: braces.opening + 1] + text[braces.closing :]  # nothing else inside: `{}`, as it was
    if not _alone(text, member.start):  # on a line with others: up to the next member, or from the comma before
        if member.comma is not None and index + 1 < len(members):
            return text[: member.start] + text[members[index + 1].start :]
        if index > 0:
            comma = members[index - 1].comma
            assert comma is not None
            return text[:comma] + text[end:]
        return text[: member.start] + text[end:]
    start = member.start
    rest = _REST_OF_LINE.match(text, end)
    if rest and not text[end : rest.end()].strip():  # the whole line(s), with the line break after them
        start = text.rfind("\n", 0, start) + 1
        end = rest.end() + (2 if text.startswith("\r\n", rest.end()) else 1)
    cuts = [(start, end)]
    if member.comma is None and index > 0:  # the last member: the comma before it goes with it
        comma = members[index - 1].comma
        assert comma is not None
        cuts.append((comma, comma + 1))
    for cut_start, cut_end in sorted(cuts, reverse=True):
        text = text[:cut_start] + text[cut_end:]
    return text


def checked(text: str, *, comments: bool, expected: dict[str, Any]) -> str:
    """`text`, once it parses back to `expected`.

    Raises:
        JsonTextError: it does not: the change would alter more than the entry (nothing may be written).
    """
    try:
        value = parse(text, comments=comments).value
    except JsonTextError as exc:
        raise JsonTextError(f"the change would not be valid ({exc}); nothing was written") from None
    if value != expected:
        raise JsonTextError("the change would alter more than meta-agent's entry; nothing was written")
    return text


def _inserted(text: str, target: Object, key: str, value: Any) -> str:
    """`text` with the member `key: value` added at the end of the object `target`."""
    line_break = "\r\n" if "\r\n" in text else "\n"
    if not target.members:
        outer = _line_indent(text, target.opening)
        indent = outer + _indent_unit(text)
        member = _member(text, key, value, indent, inline=False)
        inside = text[target.opening + 1 : target.closing]
        after = line_break + outer if not inside.strip() else ""  # comments inside stay, after the new member
        end = target.closing if not inside.strip() else target.opening + 1
        return f"{text[: target.opening + 1]}{line_break}{indent}{member}{after}{text[end:]}"
    last = target.members[-1]
    if not _alone(text, target.members[0].start):  # all on one line: so is the new member
        member = _member(text, key, value, "", inline=True)
        if last.comma is not None:  # a trailing comma, kept
            return f"{text[: last.comma + 1]} {member},{text[last.comma + 1 :]}"
        return f"{text[: last.value_end]}, {member}{text[last.value_end :]}"
    indent = _line_indent(text, target.members[0].start)
    member = _member(text, key, value, indent, inline=False)
    if last.comma is not None:
        at = _line_end(text, last.comma + 1)
        return f"{text[:at]}{line_break}{indent}{member},{text[at:]}"
    at = _line_end(text, last.value_end)
    return f"{text[: last.value_end]},{text[last.value_end : at]}{line_break}{indent}{member}{text[at:]}"


def _member(text: str, key: str, value: Any, indent: str, *, inline: bool) -> str:
    return f"{json.dumps(key, ensure_ascii=False)}: {_rendered(text, value, indent, inline=inline)}"


def _rendered(text: str, value: Any, indent: str, *, inline: bool) -> str:
    """`value` as JSON for a member whose line starts with `indent`: its own lines indented one more step of the
    file's unit, or on one line."""
    if inline:
        return json.dumps(value, ensure_ascii=False)
    line_break = "\r\n" if "\r\n" in text else "\n"
    lines = json.dumps(value, indent=_indent_unit(text), ensure_ascii=False).split("\n")
    return (line_break + indent).join(lines)


def _indent_unit(text: str) -> str:
    """The file's step of indentation: that of its first indented line (a tab, or so many spaces), else two spaces."""
    match = _INDENTED_LINE.search(text)
    if match is None:
        return DEFAULT_INDENT
    found = match.group(1)
    return "\t" if "\t" in found else found


def _line_indent(text: str, at: int) -> str:
    start = text.rfind("\n", 0, at) + 1
    line = text[start:at]
    return line[: len(line) - len(line.lstrip(" \t"))]


def _alone(text: str, at: int) -> bool:
    """Whether only blanks precede position `at` on its line."""
    return not text[text.rfind("\n", 0, at) + 1 : at].strip()


def _line_end(text: str, at: int) -> int:
    """Where a new line may start after position `at`: past the blanks and comments that end its line, else `at`."""
    rest = _REST_OF_LINE.match(text, at)
    return rest.end() if rest else at


def member_of(document: Document, key: str, name: str) -> Member | None:
    """The member `name` of the servers map `key`, if the map is an object holding it."""
    servers = document.root.get(key)
    if servers is None or servers.members is None:
        return None
    return servers.members.get(name)
