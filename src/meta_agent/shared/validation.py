"""One line for what a pydantic check refused, said the same way for everything we check: servers.json, the
`META_AGENT_*` settings, the trust file, a caller's tool arguments and a child's answers.

A problem reads `path: what is wrong, got VALUE`: the path in JSON's terms (`mcpServers.pg.args[0]`,
`env["A B"]`), the type expected in JSON's words (`JSON_KINDS`), and the refused value quoted back short and on one
line (it is the sender's own data: it may be long, or hold a line break that would forge a line of its own). Each
caller puts its own prefix (the file, the setting, the tool) in front.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Sequence

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from meta_agent.shared.text import one_line

GOT_SHOWN = 40  # characters of a refused value, or of an odd key, quoted back
PROBLEMS_SHOWN = 4  # problems named in one line; the rest are counted

# What a JSON value is, in words: "got a list", "expected a whole number or null".
JSON_KINDS: dict[type, str] = {
    dict: "an object",
    list: "a list",
    str: "a string",
    int: "a whole number",
    float: "a number",
    bool: "true or false",
    type(None): "null",
}

# pydantic's error types for a value of the wrong type, with the type wanted: said as "expected a list".
_WANTED: dict[str, type] = {
    "dict_type": dict,
    "model_type": dict,
    "model_attributes_type": dict,
    "list_type": list,
    "tuple_type": list,
    "string_type": str,
    "int_type": int,
    "float_type": float,
    "bool_type": bool,
}

# A key shown as it is in a path; any other is quoted, so that a dot or a line break in it cannot mislead.
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")

Location = Sequence[int | str]
# The keys allowed in the object at a location, for a did-you-mean about an unknown key there.
KnownKeys = Callable[[Location], Sequence[str]]


def json_kind(value: object) -> str:
    """What `value` is in JSON's words ("a list", "true or false"); the Python type's name for what is not JSON."""
    return JSON_KINDS.get(type(value), type(value).__name__)


def json_path(loc: Location) -> str:
    """`mcpServers.pg.args[0]`; a key that is not a plain name is quoted: `env["A B"]`, `"a\\nb"` at the top."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif _PLAIN_KEY.fullmatch(part):
            path += f".{one_line(part, GOT_SHOWN)}" if path else one_line(part, GOT_SHOWN)
        else:
            quoted = one_line(json.dumps(part), GOT_SHOWN)
            path += f"[{quoted}]" if path else quoted
    return path or "(top level)"


def did_you_mean(name: str, known: Sequence[str], listing: str) -> str:
    """` (did you mean 'x'?)` when one of `known` is close to `name`, else ` ({listing}: a, b)`; "" if none is
    known. What follows a message about an unknown name."""
    close = _close(name, known)
    if close is not None:
        return f" (did you mean {close!r}?)"
    return f" ({listing}: {', '.join(known)})" if known else ""


def _close(name: str, known: Sequence[str]) -> str | None:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return close[0] if close else None


def refusal(exc: ValidationError, *, noun: str = "key", known: KnownKeys | None = None) -> str:
    """Every problem of `exc` as `path: problem`, joined by "; ", unknown keys first (one often explains the rest):
    the first PROBLEMS_SHOWN, and how many more there are. A missing key that an unknown key's did-you-mean names is
    the same slip (`servers` for `mcpServers`), said once. `noun` names what the keys are ("key", "argument of
    agent"); `known` gives the keys allowed where one is unknown."""
    errors = sorted(exc.errors(), key=lambda error: error["type"] != "extra_forbidden")
    meant = {_meant(error, known) for error in errors if error["type"] == "extra_forbidden"}
    errors = [error for error in errors if not (error["type"] == "missing" and tuple(error["loc"]) in meant)]
    said = [_located(error, noun=noun, known=known) for error in errors[:PROBLEMS_SHOWN]]
    more = len(errors) - len(said)
    return "; ".join(said) + (f" (and {more} more)" if more else "")


def _meant(error: ErrorDetails, known: KnownKeys | None) -> tuple[int | str, ...] | None:
    """Where the key is that an unknown key's did-you-mean names, if it names one."""
    loc = tuple(error["loc"])
    if known is None or not loc:
        return None
    close = _close(str(loc[-1]), known(loc[:-1]))
    return None if close is None else (*loc[:-1], close)


def refusals(exc: ValidationError, *, noun: str = "key") -> list[str]:
    """Every problem of `exc`, each as `path: problem`."""
    return [_located(error, noun=noun) for error in exc.errors()]


def _located(error: ErrorDetails, *, noun: str = "key", known: KnownKeys | None = None) -> str:
    """One problem as `path: problem`."""
    return f"{json_path(error['loc'])}: {problem(error, noun=noun, known=known)}"


def problem(error: ErrorDetails, *, noun: str = "key", known: KnownKeys | None = None) -> str:
    """One problem without its path: `unknown key 'x' (did you mean 'y'?)`, `required key is missing`, `expected a
    list, got "x"`; a message of our own validators as it is (it says what it wants)."""
    kind, loc = error["type"], error["loc"]
    if kind == "extra_forbidden" and loc:
        name = str(loc[-1])
        hint = did_you_mean(name, known(loc[:-1]), "known keys") if known is not None else ""
        return f"unknown {noun} {one_line(repr(name), GOT_SHOWN)}{hint}"
    if kind == "missing":
        return f"required {noun} is missing"
    message = one_line(str(error["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, "))
    message = message[:1].lower() + message[1:]
    if kind in ("value_error", "assertion_error"):
        return message
    wanted = _WANTED.get(kind)
    if wanted is None and ", got " in message:  # pydantic says what it got in words: the value goes in brackets
        return f"{message} ({_shown(error['input'])})"
    expected = f"expected {JSON_KINDS[wanted]}" if wanted is not None else message
    return f"{expected}, got {_shown(error['input'])}"


def _shown(value: object) -> str:
    """A refused value quoted back: as JSON (escaped, so on one line), cut past GOT_SHOWN characters."""
    return one_line(json.dumps(value, default=str), GOT_SHOWN)
