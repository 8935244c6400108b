"""What is wrong with a JSON text a person wrote (servers.json, the trust file), in words, at its line and column.

Python's decoder says where it stopped and what it expected there ("Expecting property name enclosed in double
quotes"), which a newcomer has to translate back to what they did. The likeliest slips of a hand-edited config are
told by name instead: a trailing comma (at the comma's own line, not the bracket's after it), single quotes, a key
without quotes, a comment, a Windows path's backslash, an empty file, a byte order mark. Anything else keeps the
decoder's own words.
"""

from __future__ import annotations

import json

# The decoder's words for a value it expected, said once for every message that needs them.
A_VALUE = "a string in double quotes, a number, true, false, null, an object or a list"


def invalid_json(source: str, exc: json.JSONDecodeError) -> str:
    """One line: `source:LINE:COLUMN: invalid JSON (line LINE, column COLUMN): what is wrong`. The first form is the
    one editors and terminals jump to; the second reads as words."""
    position, what = _slip(exc.doc, exc.pos, exc.msg)
    line = exc.doc.count("\n", 0, position) + 1
    column = position - exc.doc.rfind("\n", 0, position)
    return f"{source}:{line}:{column}: invalid JSON (line {line}, column {column}): {what}"


def _slip(doc: str, pos: int, message: str) -> tuple[int, str]:
    """Where the mistake is (an offset into `doc`) and what it is, in words."""
    comma = pos if message.startswith("Illegal trailing comma") else _trailing_comma(doc, pos)  # 3.13 says so
    if comma is not None:
        return comma, "a trailing comma after the last item (JSON allows none): remove it"
    found = doc[pos : pos + 1]
    if message.startswith("Expecting"):  # an item, a key, a ':' or a ',' expected: what stands there instead
        return pos, _expected(doc, pos, found, message)
    if message.startswith("Unterminated string"):
        return pos, "a string is not closed: its '\"' at the end is missing"
    if message.startswith("Invalid control character"):
        return pos, "a line break or tab inside a string: write it as \\n or \\t"
    if message.startswith("Invalid \\uXXXX"):
        return pos, "a \\u escape needs four hexadecimal digits"
    if message.startswith("Invalid \\escape"):
        return pos, "a backslash JSON does not know: write a backslash as \\\\ (C:\\\\Users), or use '/'"
    if message.startswith("Unexpected UTF-8 BOM"):  # some Windows editors start a UTF-8 file with one
        return pos, "the file starts with a byte order mark (BOM): save it as UTF-8 without BOM"
    if message == "Extra data":
        return pos, "more text after the end of the JSON (an extra '}' or ']', or a second object)"
    return pos, message[:1].lower() + message[1:]


def _trailing_comma(doc: str, pos: int) -> int | None:
    """The offset of the comma before the closing bracket at `pos`, where the decoder stopped (up to Python 3.12,
    which then expects one more item); None if it stopped elsewhere."""
    before = len(doc[:pos].rstrip())
    if doc[pos : pos + 1] in ("}", "]") and before and doc[before - 1] == ",":
        return before - 1
    return None


def _expected(doc: str, pos: int, found: str, message: str) -> str:
    """What stands where the decoder expected a key, a value, a ':' or a ','."""
    if not doc.strip():
        return "the file is empty: it needs a JSON object, {...}"
    if not doc[pos:].strip():
        return "the text ends before every '{' and '[' is closed"
    if found in ("/", "#"):
        return "a comment: JSON has none"
    if message == "Expecting ':' delimiter":
        return "a ':' is missing between the key and its value"
    if message == "Expecting ',' delimiter":
        return "a ',' is missing between two items (or a string before it is not closed)"
    if found == "'":
        return "single quotes: JSON wants double quotes around every key and string"
    if found == ",":
        return "an extra comma"
    if message.startswith("Expecting property name"):
        if found.isalpha() or found == "_":
            return "a key without quotes: JSON wants every key in double quotes"
        return "expected a key in double quotes"
    return f"expected a value ({A_VALUE})"
