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

from meta_agent.config import TrustLevel
from meta_agent.errors import ConfigError

LEVELS: tuple[str, ...] = get_args(TrustLevel)


@dataclass(frozen=True, kw_only=True)
class Recorded:
    level: TrustLevel
    definition: str  # the hash of the tool's definition when the level was recorded
    recorded: str  # when, ISO 8601 UTC


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
        ConfigError: the file is not a trust file, in one line naming it.
    """
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the decoder goes
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"{path}: cannot read the trust file: {reason}") from None
    tools = raw.get("tools") if isinstance(raw, dict) else None
    if not isinstance(tools, dict):
        raise ConfigError(f'{path}: expected {{"tools": {{...}}}}; record levels with `meta-agent trust TOOL LEVEL`')
    recorded: dict[str, Recorded] = {}
    for name, entry in tools.items():
        if not (isinstance(entry, dict) and entry.get("level") in LEVELS and isinstance(entry.get("definition"), str)):
            raise ConfigError(f"{path}: tools.{name}: expected level (never, ask, always) and definition")
        recorded[name] = Recorded(
            level=entry["level"], definition=entry["definition"], recorded=str(entry.get("recorded", ""))
        )
    return recorded


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
