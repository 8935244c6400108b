"""The entry that starts this installation of meta-agent from a host: the absolute path of its `meta-agent` (or its
Python with `-m meta_agent`), `serve --config` the absolute path of servers.json, and the environment the run needs;
how an entry is known to be meta-agent's own; and how its environment is shown without a secret in full.

A host starts the entry with its own environment, not the user's shell: no activated venv, a PATH of its own, another
working directory (docs/hosts.md, Why the paths are absolute). So nothing in the entry may depend on them.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from meta_agent.config.servers import OWN_PYTHON, VARIABLE
from meta_agent.config.settings import Settings
from meta_agent.errors import ConfigError
from meta_agent.providers.model_setting import PROVIDER_VARIABLES
from meta_agent.shared.secrets import is_secret_name, masked
from meta_agent.shared.urls import loggable_url

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The console script's name, as pip installs it next to the interpreter.
_SCRIPT = "meta-agent.exe" if sys.platform == "win32" else "meta-agent"


@dataclass(frozen=True, kw_only=True)
class Entry:
    """A stdio server entry, in no host's shape yet: what is started, with what arguments and environment."""

    command: str
    args: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)


def this_installation() -> tuple[str, tuple[str, ...]]:
    """How a host starts this installation: the absolute path of the `meta-agent` script beside this Python (the
    venv's `bin`, or `Scripts` on Windows), else this Python itself with `-m meta_agent`. The path is absolute but
    not resolved: a venv's `python` is a link, and resolving it would leave the venv."""
    python = Path(os.path.abspath(sys.executable))
    script = python.parent / _SCRIPT
    if script.is_file():
        return str(script), ()
    return str(python), ("-m", "meta_agent")


def entry_for(config: Path, env: Mapping[str, str]) -> Entry:
    """The entry of this installation serving `config` (made absolute) with `env`."""
    command, prefix = this_installation()
    return Entry(command=command, args=(*prefix, "serve", "--config", os.path.abspath(config)), env=dict(env))


def is_ours(entry: Any) -> bool:
    """Whether a host file's entry starts meta-agent (this installation's or another's, written by `install` or by
    hand): its command is a `meta-agent` script, or a Python with `-m meta_agent`."""
    if not isinstance(entry, dict) or not isinstance(entry.get("command"), str):
        return False
    name = Path(entry["command"].replace("\\", "/")).name.lower().removesuffix(".exe")
    args = entry.get("args")
    module = isinstance(args, list) and args[:2] == ["-m", "meta_agent"]
    return name == "meta-agent" or (name.startswith("python") and module)


def read_variables(servers_text: str) -> list[str]:
    """The variables meta-agent reads: every `META_AGENT_*` setting (but META_AGENT_CONFIG: the entry names its file),
    the providers' keys and endpoints, and those servers.json expands (`${VAR}`)."""
    settings = [f"META_AGENT_{name.upper()}" for name in Settings.model_fields if name != "config"]
    expanded = [match["name"] for match in VARIABLE.finditer(servers_text) if match["name"] != OWN_PYTHON]
    return list(dict.fromkeys([*settings, *PROVIDER_VARIABLES, *expanded]))


def env_of(
    options: Sequence[str], *, from_shell: bool, environ: Mapping[str, str], servers_text: str
) -> dict[str, str]:
    """The entry's environment: with `from_shell`, each variable meta-agent reads that is set (not empty) in
    `environ`; then each `--env` option, `KEY=VALUE`, or `KEY` for its value in `environ`.

    Raises:
        ConfigError: an option that names no variable, a `KEY` not set in `environ`, a value with a NUL.
    """
    env = {name: environ[name] for name in read_variables(servers_text) if environ.get(name)} if from_shell else {}
    for option in options:
        name, equals, value = option.partition("=")
        if not _ENV_NAME.fullmatch(name):  # the value is not repeated: it may be a key
            raise ConfigError(f"--env: {name[:40]!r} is no variable name (expected KEY=VALUE)")
        if not equals:
            if name not in environ:
                raise ConfigError(f"--env {name}: {name} is not set here (give --env {name}=VALUE)")
            value = environ[name]
        if "\0" in value:
            raise ConfigError(f"--env {name}: a value cannot hold a NUL character")
        env[name] = value
    return env


def shown(name: str, value: str) -> str:
    """`NAME=value` as the command line may print it: a secret (by its variable's name) masked, a URL without its
    user info and query, and no line break."""
    if is_secret_name(name):
        value = masked(value)
    elif "://" in value:
        value = loggable_url(value)
    return f"{name}={value!r}" if not value.isprintable() else f"{name}={value}"
