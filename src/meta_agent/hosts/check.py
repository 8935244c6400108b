"""The entry started as its host will start it, to say before the host does whether it works: its command, arguments
and environment only (over the few variables every host passes on: HOME, USER, ...), the PATH a host started from the
desktop has, another working directory; then `initialize` and `tools/list` through the SDK's stdio client, and the
toolbox resource read until no child is starting. The answer is "ready", or the one line that is wrong: what
meta-agent said as it stopped (a missing key, a bad setting), or the child that does not start that way (a command
the host's PATH does not find).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TextIO

import anyio
import mcp.types as t
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPDeprecationWarning

from meta_agent.config.servers import ServerEntry
from meta_agent.errors import summary
from meta_agent.hosts.entry import Entry
from meta_agent.shared.text import one_line, plural
from meta_agent.toolbox import TOOLBOX_URI

# The PATH a host started from the desktop gives its servers: launchd's default for applications on macOS, as little as
# a Linux desktop gives. A child's bare command name (`npx`, `uvx`) must be found there, or be written out whole.
HOST_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"
# Seconds for meta-agent to answer `initialize` and `tools/list` (it starts in one or two).
ANSWER_TIMEOUT = 30.0
# A toolbox that said nothing for this long is read again anyway.
REREAD_SECONDS = 1.0
# What is read back of the server's stderr to find why it stopped: its last lines.
STDERR_TAIL = 64 * 1024
_LINE = 300  # characters of a line quoted from the server at most
_OURS = "meta-agent: "  # how meta-agent's own one-line failures begin (cli/terminal.py)


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """Whether the entry works as its host will start it, and the line that says so."""

    ready: bool
    line: str


def host_path() -> str:
    """The PATH of the check: HOST_PATH, or on Windows the system's own folders."""
    if sys.platform == "win32":
        root = os.environ.get("SYSTEMROOT", r"C:\Windows")
        return rf"{root}\System32;{root}"
    return HOST_PATH


async def started_as_host(entry: Entry, servers: Mapping[str, ServerEntry], *, start_timeout: float) -> Verdict:
    """Start `entry` as a host would and say whether it is ready; `servers` are its children (for the hint on a
    command the host's PATH does not find), each given `start_timeout` seconds to start."""
    env = {"PATH": host_path(), **entry.env}
    with (
        tempfile.TemporaryDirectory(prefix="meta-agent-check-") as elsewhere,
        tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog,
    ):
        params = StdioServerParameters(command=entry.command, args=list(entry.args), env=env, cwd=elsewhere)
        try:
            with anyio.fail_after(ANSWER_TIMEOUT + start_timeout):
                return await _ask(params, errlog, servers)
        except TimeoutError:
            said = _last_words(errlog)
            return Verdict(ready=False, line=f"no answer within {ANSWER_TIMEOUT + start_timeout:g} s{_after(said)}")
        except Exception as exc:  # the process could not start, or ended: what it said is why
            said = _last_words(errlog)
            return Verdict(ready=False, line=said or f"it did not start: {summary(exc)}")


async def _ask(params: StdioServerParameters, errlog: TextIO, servers: Mapping[str, ServerEntry]) -> Verdict:
    changed = _Changes()
    async with Client(stdio_client(params, errlog=errlog), mode="legacy", message_handler=changed) as client:
        tools: list[str] = []
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor)
            tools += [tool.name for tool in page.tools]
            if not (cursor := page.next_cursor):
                break
        children = await _settled_children(client, changed)
    failed = [child for child in children if child["status"] not in ("ready", "disabled")]
    if failed:
        return Verdict(ready=False, line=_child_line(failed[0], servers))
    ready = [child["name"] for child in children if child["status"] == "ready"]
    of_children = f"children ready: {', '.join(ready)}" if ready else "no child servers"
    return Verdict(ready=True, line=f"ready: {plural(len(tools), 'tool')} ({', '.join(tools)}); {of_children}")


class _Changes:
    """The server's notifications, of which the check waits for one: the toolbox changed."""

    def __init__(self) -> None:
        self.event = anyio.Event()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, t.ResourceUpdatedNotification):
            self.event.set()


async def _settled_children(client: Client, changed: _Changes) -> list[dict[str, Any]]:
    """The toolbox's children once none is starting (each has its own start timeout, so this ends)."""
    with warnings.catch_warnings():  # a host of the 2025-11-25 era subscribes just so; 2026-07-28 would listen
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        await client.subscribe_resource(TOOLBOX_URI)
    while True:
        changed.event = anyio.Event()
        contents = (await client.read_resource(TOOLBOX_URI)).contents[0]
        assert isinstance(contents, t.TextResourceContents)
        children: list[dict[str, Any]] = json.loads(contents.text)["servers"]
        if not any(child["status"] == "starting" for child in children):
            return children
        with anyio.move_on_after(REREAD_SECONDS):
            await changed.event.wait()


def _child_line(child: Mapping[str, Any], servers: Mapping[str, ServerEntry]) -> str:
    name = child["name"]
    line = f"the child server {name!r} does not start as a host starts meta-agent: {child.get('error') or 'failed'}"
    entry = servers.get(name)
    command = entry.command if entry is not None else None
    bare = command is not None and "/" not in command and "\\" not in command
    if bare and shutil.which(command or "", path=host_path()) is None:
        where = shutil.which(command or "")
        line += (
            f" ({command!r} is looked up on the host's PATH, {host_path()}, where it is not: write its absolute path"
            f"{f', {where},' if where else ''} as the command in servers.json)"
        )
    return one_line(line)


def _last_words(errlog: TextIO) -> str:
    """What meta-agent said last on its stderr: its own one-line failure if there is one, else the last line."""
    errlog.flush()
    errlog.seek(0, os.SEEK_END)
    errlog.seek(max(0, errlog.tell() - STDERR_TAIL))
    lines = [line.strip() for line in errlog.read().splitlines() if line.strip()]
    ours = [line.removeprefix(_OURS) for line in lines if line.startswith(_OURS)]
    last = ours[-1] if ours else lines[-1] if lines else ""
    return one_line(last, _LINE)


def _after(said: str) -> str:
    return f"; it said last: {said}" if said else ""
