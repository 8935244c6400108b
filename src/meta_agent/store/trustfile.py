"""Trust levels a user recorded with `meta-agent trust`, kept in a file beside the config (`servers.trust.json`).

Each entry holds a hash of the tool's description, input schema and annotations as they were when the level was
recorded. A recorded level applies only while the tool still has that definition: a child that changes a tool loses
the trust recorded for it until the user records it again, and meanwhile the tool is asked about at most (a
recorded `never` stays `never`) — a changed tool never gains trust from its new annotations.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_args

from pydantic import TypeAdapter, ValidationError

from meta_agent.core.policy import TrustLevel
from meta_agent.errors import ConfigError
from meta_agent.shared.json_errors import invalid_json
from meta_agent.shared.text import first_line
from meta_agent.shared.validation import refusal

TRUST_LEVELS: tuple[str, ...] = get_args(TrustLevel)


class NotJson(ConfigError):
    """A trust file that is not JSON, or not `{"tools": {...}}`: its entries cannot be told apart."""


@dataclass(frozen=True, kw_only=True)
class Recorded:
    level: TrustLevel
    definition: str  # the hash of the tool's definition when the level was recorded
    recorded: str = ""  # when, ISO 8601 UTC (a file edited by hand may leave it out)


@dataclass(frozen=True, kw_only=True)
class _TrustFile:
    tools: dict[str, Recorded]  # by the tool's MCP-facing name


# Decodes what `save` writes; fields we do not know are ignored.
TRUST_FILE: TypeAdapter[_TrustFile] = TypeAdapter(_TrustFile)
SHAPE = 'expected {"tools": {...}}; record levels with `meta-agent trust TOOL LEVEL`'
# How to repair a file whose entries cannot be told apart (not JSON, or not of that shape): `forget` sets it aside.
START_AFRESH = "fix it, or start afresh: `meta-agent trust '*' forget` keeps it beside, renamed"
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.-]+")  # an entry's name that a command line can take as it is


def trust_path(config: Path) -> Path:
    """The trust file beside `config`: servers.json → servers.trust.json."""
    return config.with_name(f"{config.stem}.trust.json")


def definition_hash(description: str, input_schema: Mapping[str, Any], annotations: Mapping[str, Any]) -> str:
    """What a recorded level is bound to: the tool's description, input schema and annotations."""
    canonical = json.dumps(
        {"description": description, "input_schema": input_schema, "annotations": annotations}, sort_keys=True
    )
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def load(path: Path) -> dict[str, Recorded]:
    """The recorded levels; none when the file does not exist.

    Raises:
        ConfigError: the file is not a trust file, in one line naming it (the line and column, or the entry, at
            fault) and how to repair it.
    """
    try:
        raw = _read(path)
    except FileNotFoundError:
        return {}
    try:
        return TRUST_FILE.validate_python(raw).tools
    except ValidationError as exc:
        raise ConfigError(f"{path}: {_problem(exc)}") from None


def _read(path: Path) -> Any:
    """The file's JSON.

    Raises:
        FileNotFoundError: there is no file.
        ConfigError: it cannot be read; NotJson: it is not JSON.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8
        reason = first_line(str(exc)) or type(exc).__name__
        raise ConfigError(f"{path}: cannot read the trust file: {reason}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise NotJson(f"{invalid_json(str(path), exc)}; {START_AFRESH}") from None
    except (ValueError, RecursionError) as exc:  # a number too long to convert; nested deeper than the decoder goes
        reason = first_line(str(exc)) or type(exc).__name__
        raise NotJson(f"{path}: invalid JSON: {reason}; {START_AFRESH}") from None


def _problem(exc: ValidationError) -> str:
    """What is wrong, in one line, and how to repair it: the file's shape, or the entries (their names quoted where
    they are not plain names) and fields at fault, and the command that forgets the first of them."""
    errors = exc.errors()
    if len(errors[0]["loc"]) < 2:  # the file, or its "tools", is not an object
        return f"{SHAPE}; {START_AFRESH}"
    names = {str(error["loc"][1]) for error in errors if len(error["loc"]) > 1}
    name = names.pop() if len(names) == 1 else "NAME"
    pattern = name if _PLAIN_NAME.fullmatch(name) else "NAME"
    return f"{refusal(exc)}; fix it, or forget the entry: `meta-agent trust {pattern} forget`"


@dataclass(frozen=True, kw_only=True)
class Forgotten:
    """What `forget` did: the levels it dropped, where it set a broken file aside, and what is still wrong."""

    names: list[str]
    set_aside: Path | None = None
    still: str | None = None  # why what is left still cannot be read (the rest of a broken file)


def forget(path: Path, pattern: str) -> Forgotten:
    """Drop the levels recorded for the tools `pattern` matches. It repairs a file `load` refuses too: the entries
    of a `{"tools": {...}}` are dropped by name whatever they hold (the others are kept as they are), and a file that
    is not one at all, whose entries cannot be told apart, is set aside under a new name when `pattern` matches
    every name (`*`), so the levels start afresh, and is refused otherwise.

    Raises:
        ConfigError: nothing recorded matches `pattern`, or the file cannot be read (or is not a trust file, and
            `pattern` is not `*`).
    """
    try:
        raw = _read(path)
        if not isinstance(raw, dict) or not isinstance(raw.get("tools", {}), dict):
            raise NotJson(f"{path}: {SHAPE}; {START_AFRESH}")
    except FileNotFoundError:
        raw = {}
    except NotJson:
        if pattern.strip("*"):  # some entries only, of a file whose entries cannot be told apart
            raise
        aside = path.with_name(f"{path.name}.broken-{now().replace(':', '')}")
        os.replace(path, aside)
        return Forgotten(names=[], set_aside=aside)
    entries: dict[str, Any] = dict(raw.get("tools", {}))
    names = [name for name in entries if fnmatch.fnmatchcase(name, pattern)]
    if not names:
        raise ConfigError(f"trust: nothing recorded matches {pattern!r} in {path}")
    _write(path, {**raw, "tools": {name: entry for name, entry in entries.items() if name not in names}})
    try:
        load(path)
    except ConfigError as exc:
        return Forgotten(names=names, still=str(exc))
    return Forgotten(names=names)


def save(path: Path, recorded: Mapping[str, Recorded]) -> None:
    """Write atomically (a temporary file renamed over the old one), so a reader never sees half a file."""
    body = {
        "tools": {
            name: {"level": r.level, "definition": r.definition, "recorded": r.recorded}
            for name, r in sorted(recorded.items())
        }
    }
    _write(path, body)


def _write(path: Path, body: Mapping[str, Any]) -> None:
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as tmp:
        json.dump(body, tmp, indent=2)
        tmp.write("\n")
    os.replace(tmp.name, path)


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
