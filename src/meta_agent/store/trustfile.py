"""Trust levels a user recorded with `meta-agent trust`, kept in a file beside the config (`servers.trust.json`).

Each entry holds a hash of the tool's description, input schema and annotations as they were when the level was
recorded. A recorded level applies only while the tool still has that definition: a child that changes a tool loses
the trust recorded for it until the user records it again, and meanwhile the tool is asked about at most (a
recorded `never` stays `never`) — a changed tool never gains trust from its new annotations.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_args

from pydantic import TypeAdapter, ValidationError

from meta_agent.core.policy import TrustLevel
from meta_agent.errors import ConfigError
from meta_agent.shared.text import first_line
from meta_agent.shared.validation import refusal

TRUST_LEVELS: tuple[str, ...] = get_args(TrustLevel)


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
        ConfigError: the file is not a trust file, in one line naming it (and the entry at fault).
    """
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the decoder goes
        reason = first_line(str(exc)) or type(exc).__name__
        raise ConfigError(f"{path}: cannot read the trust file: {reason}") from None
    try:
        return TRUST_FILE.validate_python(raw).tools
    except ValidationError as exc:
        raise ConfigError(f"{path}: {_problem(exc)}") from None


def _problem(exc: ValidationError) -> str:
    """The first thing wrong, in one line: the file's shape, or the entry (its name quoted where it is not a plain
    name) and field at fault."""
    if len(exc.errors()[0]["loc"]) < 2:  # the file, or its "tools", is not an object
        return SHAPE
    return refusal(exc)


def save(path: Path, recorded: Mapping[str, Recorded]) -> None:
    """Write atomically (a temporary file renamed over the old one), so a reader never sees half a file."""
    body = {
        "tools": {
            name: {"level": r.level, "definition": r.definition, "recorded": r.recorded}
            for name, r in sorted(recorded.items())
        }
    }
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as tmp:
        json.dump(body, tmp, indent=2)
        tmp.write("\n")
    os.replace(tmp.name, path)


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
