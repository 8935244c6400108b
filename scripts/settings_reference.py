"""Write docs/settings.md, the settings reference, from the settings model: one entry per `META_AGENT_*` variable,
with its type, default, bounds and the description of its field. `--check` writes nothing and exits 1 when the page
differs from what the model gives (tests/repo/test_repo_docs.py runs the same comparison).

A committed page rather than one made while the site builds: it reads on the repository's own pages too, a change to a
setting shows as a change to the page in review, and the site builds without importing meta-agent.

    python scripts/settings_reference.py [--check]
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal

from annotated_types import Ge, Gt, Le, Lt
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from meta_agent import Settings  # the public name, wherever the model's module is

PAGE = Path(__file__).resolve().parent.parent / "docs" / "settings.md"
UNDESCRIBED = "(not described yet: give the field a `description`)"
HEADER = """\
# Settings reference

Every setting is an environment variable, `META_AGENT_` and the setting's name, read when a command starts (a
host passes them in the `env` of its entry: see [Hosts](hosts.md)). A value that cannot be used is one line naming the
variable, and exit 2. The providers' own variables (`OPENAI_API_KEY`, `OPENAI_BASE_URL`, `ANTHROPIC_API_KEY`,
`GEMINI_API_KEY`, `OLLAMA_HOST`) are told in [Models and local models](models.md).

This page is generated from the descriptions of the fields of `Settings` by `scripts/settings_reference.py`: change a
description there, not here.
"""
SIMPLE_TYPES = {str: "text", int: "integer", float: "number", Path: "path", bool: "true or false"}
BOUNDS = ((Ge, "ge", "at least"), (Gt, "gt", "more than"), (Le, "le", "at most"), (Lt, "lt", "less than"))


def render(model: type[BaseSettings]) -> str:
    """The reference page of `model`'s fields, in the order the model declares them."""
    prefix = model.model_config.get("env_prefix", "")
    entries = [_entry(f"{prefix}{name}".upper(), field) for name, field in model.model_fields.items()]
    return HEADER + "".join(entries)


def _entry(variable: str, field: FieldInfo) -> str:
    facts = [f"type: {_kind(field.annotation)}", f"default: {_default(field.default)}", *_bounds(field)]
    description = " ".join((field.description or UNDESCRIBED).split())
    return f"\n## `{variable}`\n\n{'; '.join(facts)}.\n\n{description}\n"


def _kind(annotation: Any) -> str:
    """The type of a setting in a reader's words: `number`, `one of auto, on, off`, with `unset` where it may be."""
    arguments = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        kinds = [_kind(argument) for argument in arguments if argument is not type(None)]
        return " or ".join(kinds) + (" or unset" if type(None) in arguments else "")
    if typing.get_origin(annotation) is Literal:
        return "one of " + ", ".join(f"`{value}`" for value in arguments)
    return SIMPLE_TYPES.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _default(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value}`"


def _bounds(field: FieldInfo) -> list[str]:
    """The bounds the field's constraints put on a value (`at least 1`)."""
    found = []
    for constraint in field.metadata:
        for kind, attribute, words in BOUNDS:
            if isinstance(constraint, kind):
                found.append(f"{words} {_default(getattr(constraint, attribute)).strip('`')}")
    return found


def main(arguments: list[str]) -> int:
    page = render(Settings)
    if arguments == ["--check"]:
        if PAGE.exists() and PAGE.read_text(encoding="utf-8") == page:
            return 0
        print(f"{PAGE.name} differs from the settings model: run scripts/settings_reference.py", file=sys.stderr)
        return 1
    if arguments:
        print("usage: scripts/settings_reference.py [--check]", file=sys.stderr)
        return 2
    PAGE.write_text(page, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
