"""`meta-agent install HOST`, `meta-agent uninstall HOST` and `meta-agent bundle` (docs/hosts.md): meta-agent put into a
host's own config file, checked as the host will start it, taken out again, or packed as an MCP bundle.

Imported only when one of them runs. Exit codes: 0 done (and, for install, ready); 1 the entry was written but the
check found it not ready; 2 refused, with one line naming the file or the argument, and nothing written.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import anyio

from meta_agent.cli.terminal import EXIT_FAILED, EXIT_SIGNALLED, EXIT_USAGE, fail, note
from meta_agent.config.servers import Servers, load_servers
from meta_agent.config.settings import load_settings, unknown_settings
from meta_agent.errors import ConfigError
from meta_agent.hosts import HOSTS, bundle, config_file
from meta_agent.hosts.changes import installing, uninstalling
from meta_agent.hosts.entry import Entry, entry_for, env_of, shown
from meta_agent.hosts.host import Host, Place
from meta_agent.providers.model_setting import PROVIDER_VARIABLES
from meta_agent.shared.secrets import is_secret_name, masked


def run(args: argparse.Namespace) -> int:
    """Run `install`, `uninstall` or `bundle`, as `args.command` says."""
    commands = {"install": install, "uninstall": uninstall, "bundle": build_bundle}
    try:
        return commands[args.command](args)
    except ConfigError as exc:
        return fail(str(exc), EXIT_USAGE)


def install(args: argparse.Namespace) -> int:
    """Write meta-agent's entry into the host's file (or print it, for `mcp-json`), then check it.

    Raises:
        ConfigError: bad input, or a file that cannot be changed safely; nothing was written.
    """
    host = HOSTS[args.host]
    config, servers = _servers_json(args)
    env = env_of(args.env, from_shell=args.env_from_shell, environ=os.environ, servers_text=config.read_text())
    for line in unknown_settings(env):
        note(line)
    entry = entry_for(config, env)
    shaped = host.entry(entry.command, list(entry.args), entry.env)
    target = _target(host, args)
    if target is None:  # the entry printed whole, but for its secrets
        hidden = {name: masked(value) if is_secret_name(name) else value for name, value in env.items()}
        printed = {**shaped, "env": hidden} if env else shaped
        print(json.dumps({host.servers_key: {args.name: printed}}, indent=2, ensure_ascii=False))
        if any(is_secret_name(name) for name in env):
            note("secrets are shown masked: put them in yourself, or give --file PATH to write the entry whole")
        out = sys.stderr
    else:
        host_file = config_file.read(target, comments=host.comments)
        change = installing(host, host_file, args.name, shaped, force=args.force)
        backup = config_file.write(host_file, change.text)
        _tell(host, change.done, args.name, host_file, backup, entry)
        out = sys.stdout
    if args.no_check:
        return 0
    return _check(host, entry, servers, args.start_timeout, out)


def uninstall(args: argparse.Namespace) -> int:
    """Remove meta-agent's entry from the host's file.

    Raises:
        ConfigError: bad input, or a file that cannot be changed safely; nothing was written.
    """
    host = HOSTS[args.host]
    target = _target(host, args)
    if target is None:
        raise ConfigError(f"{host.name}: give --file PATH: this host's entry is printed, never written")
    host_file = config_file.read(target, comments=host.comments)
    change = uninstalling(host, host_file, args.name, force=args.force)
    if change is None:
        print(f"{host.title}: {target} has no entry {args.name!r}; nothing changed")
        return 0
    backup = config_file.write(host_file, change.text)
    print(f"{host.title}: removed the entry {args.name!r} from {host_file.named} (the old file: {backup})")
    return 0


def build_bundle(args: argparse.Namespace) -> int:
    """Write the MCP bundle.

    Raises:
        ConfigError: servers.json is missing or invalid, or the bundle cannot be written.
    """
    config, _ = _servers_json(args)
    output: Path = args.output
    if output.is_dir():
        output = output / bundle.DEFAULT_OUTPUT.name
    try:
        names = bundle.build(config, output, python=args.python)
    except OSError as exc:
        raise ConfigError(f"{output}: cannot write the bundle: {exc.strerror or exc}") from None
    print(f"wrote {output} ({', '.join(names)})")
    print("Claude Desktop installs it from Settings → Extensions → Advanced settings → Install Extension (or open it)")
    return 0


def _servers_json(args: argparse.Namespace) -> tuple[Path, Servers]:
    """servers.json as the other commands find it (--config, else META_AGENT_CONFIG, else ./servers.json), checked,
    and its absolute path: a host starts meta-agent in a directory of its own."""
    given: Path = args.config or load_settings().config
    servers = load_servers(given, os.environ)
    return Path(os.path.abspath(given)), servers


def _target(host: Host, args: argparse.Namespace) -> Path | None:
    """The file to change: --file, else the host's file in --project, else the host's file for this user (None for
    a host that has none: the entry is printed)."""
    if args.file is not None:
        return Path(os.path.abspath(args.file))
    if args.project is not None:
        if host.project_file is None:
            raise ConfigError(f"--project: {host.title} has no project scope; its file is for this user")
        if not args.project.is_dir():
            raise ConfigError(f"--project {args.project}: not a directory")
        return host.project_file(Path(os.path.abspath(args.project)))
    return host.user_file(Place.here()) if host.user_file is not None else None


def _tell(host: Host, done: str, name: str, host_file: config_file.HostFile, backup: Path | None, entry: Entry) -> None:
    into = "in" if done == "replaced" else "to"
    print(f"{host.title}: {done} the entry {name!r} {into} {host_file.named}")
    if host_file.path != host_file.named:
        print(f"  the file is {host_file.path} (the link stays)")
    if backup is not None:
        print(f"  the old file: {backup}")
    print(f"  command: {shlex.join([entry.command, *entry.args])}")
    if entry.env:
        print(f"  env: {' '.join(shown(name, value) for name, value in entry.env.items())}")
        if any(is_secret_name(name) for name in entry.env) and _others_may_read(host_file.path):
            print(f"  other users of this machine may read the file, which holds a key: chmod 600 {host_file.path}")
    if host.name == "claude-desktop":
        print("  Claude Desktop reads its file when it starts: restart it")


def _others_may_read(path: Path) -> bool:
    return os.name == "posix" and bool(path.stat().st_mode & 0o044)


def _check(host: Host, entry: Entry, servers: Servers, start_timeout: float, out: TextIO) -> int:
    from meta_agent.hosts.check import host_path, started_as_host  # brings the MCP SDK: only now

    print(f"checking it as {host.title} starts it (PATH={host_path()}, another working directory) ...", file=out)
    try:
        verdict = anyio.run(partial(started_as_host, entry, servers, start_timeout=start_timeout))
    except KeyboardInterrupt:
        note("the check was stopped; the entry is written")
        return EXIT_SIGNALLED + signal.SIGINT
    if not verdict.ready:
        print(f"not ready: {verdict.line}", file=out)
        return EXIT_FAILED
    print(verdict.line, file=out)
    if not _names_a_model(entry.env):
        note(
            "the entry names no model nor a provider's key: each call asks the host's own model (MCP sampling), which"
            " few hosts lend; give --env META_AGENT_MODEL=provider:model with its key, or --env-from-shell"
        )
    return 0


def _names_a_model(env: dict[str, Any]) -> bool:
    return any(env.get(name) for name in ("META_AGENT_MODEL", *PROVIDER_VARIABLES))
