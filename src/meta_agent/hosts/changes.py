"""What `install` and `uninstall` do to a host's file, decided before anything is written: the new text, or a refusal
in one line naming the file.

A name holds one entry. Installing again under the same name replaces meta-agent's own entry there (`--name` keeps
two); an entry of that name that starts something else is another server's, and is replaced only with `--force`.
Uninstalling removes meta-agent's entry of that name and nothing else.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Literal

from meta_agent.errors import ConfigError
from meta_agent.hosts.config_file import HostFile
from meta_agent.hosts.edits import checked, fresh, with_entry, without_entry
from meta_agent.hosts.entry import is_ours
from meta_agent.hosts.host import Host
from meta_agent.hosts.jsonc import JsonTextError


@dataclass(frozen=True, kw_only=True)
class Change:
    """The file's new text, and what it does to the entry."""

    text: str
    done: Literal["added", "replaced", "removed"]


def installing(host: Host, host_file: HostFile, name: str, entry: dict[str, Any], *, force: bool) -> Change:
    """The file with `entry` as `name` in the host's servers map.

    Raises:
        ConfigError: the servers map is not an object, or `name` is another server's entry and not `force`.
    """
    key = host.servers_key
    document = host_file.document
    if document is None:
        return Change(text=fresh(key, name, entry), done="added")
    servers = _servers(host_file, key)
    if name in servers and not is_ours(servers[name]) and not force:
        raise ConfigError(
            f"{host_file.named}: {key}.{name} is another server's entry ({_what(servers[name])}); choose another"
            " --name, or give --force to replace it; nothing was written"
        )
    expected = copy.deepcopy(document.value)
    expected.setdefault(key, {})[name] = entry
    text = _checked(host, host_file, with_entry(document, key, name, entry), expected)
    return Change(text=text, done="replaced" if name in servers else "added")


def uninstalling(host: Host, host_file: HostFile, name: str, *, force: bool) -> Change | None:
    """The file without meta-agent's entry `name`; None when it has no entry of that name.

    Raises:
        ConfigError: the servers map is not an object, or `name` is another server's entry and not `force`.
    """
    key = host.servers_key
    document = host_file.document
    if document is None:
        return None
    servers = _servers(host_file, key)
    if name not in servers:
        return None
    if not is_ours(servers[name]) and not force:
        raise ConfigError(
            f"{host_file.named}: {key}.{name} is another server's entry ({_what(servers[name])}), not meta-agent's;"
            " give --force to remove it anyway; nothing was written"
        )
    expected = copy.deepcopy(document.value)
    del expected[key][name]
    return Change(text=_checked(host, host_file, without_entry(document, key, name), expected), done="removed")


def _servers(host_file: HostFile, key: str) -> dict[str, Any]:
    assert host_file.document is not None
    servers = host_file.document.value.get(key, {})
    if not isinstance(servers, dict):
        raise ConfigError(f"{host_file.named}: {key} is not an object (the host reads its servers there)")
    return servers


def _checked(host: Host, host_file: HostFile, text: str, expected: dict[str, Any]) -> str:
    try:
        return checked(text, comments=host.comments, expected=expected)
    except JsonTextError as exc:
        raise ConfigError(f"{host_file.named}: {exc}") from None


def _what(entry: Any) -> str:
    if isinstance(entry, dict) and isinstance(entry.get("command"), str):
        return f"command {entry['command']!r}"
    if isinstance(entry, dict) and isinstance(entry.get("url"), str):
        return "a URL"
    return "not a command"
