"""Why a run's `tools` pattern matches no tool, said so that it names the fix: how tools are named, the tools there
are (every child's, once they have started), and the likeliest one meant: a did-you-mean over the servers' names and
then over their tools' own names (`tme.*` → `time.*`, `time.get_curent_time` → `time.get_current_time`).
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Sequence

from meta_agent.children.supervisor import ChildStatus
from meta_agent.core.result import Mode
from meta_agent.core.tools import ToolSpec
from meta_agent.shared.text import some_of
from meta_agent.toolbox.build import may_name_server

TOOLS_NAMED = 12  # tools listed in the line; the rest are an ellipsis (`meta-agent tools` lists them all)
CLOSE = 0.6  # difflib's likeness a name needs to be offered as meant (its own default)


def why_missing(
    pattern: str, mode: Mode, tools: Sequence[ToolSpec], ask_tools: Sequence[ToolSpec], children: Sequence[ChildStatus]
) -> str:
    """What follows "pattern 'P' matches no tool": ` (…)` with why and what was likely meant.

    Args:
        pattern: the glob that matched nothing.
        mode: the run's mode (ask mode sees the internal tools only).
        tools: every tool of the toolbox, the children's that have started included.
        ask_tools: the tools ask mode offers.
        children: the status of each child server.
    """
    if "__" in pattern and "." not in pattern:  # the model's name of a tool (server__tool), not its own
        dotted = pattern.replace("__", ".", 1)
        return f" (tools are named SERVER.TOOL, as `meta-agent tools` lists them: did you mean {dotted!r}?)"
    if mode == "ask":
        internal = ", ".join(spec.name for spec in ask_tools) or "none is enabled"
        return f" of ask mode, which uses internal tools only ({internal})"
    servers = [status.name for status in children]
    names = some_of([spec.name for spec in tools], TOOLS_NAMED)
    listed = f"the tools are: {names}" if names else "there are no tools"
    if "." not in pattern:  # a tool's own name without its server's (get_current_time), or a server's name alone
        guess = _undotted_guess(pattern, tools, servers)
        if guess is not None and "." not in guess:  # an internal tool's name, misspelt
            return f" (did you mean {guess!r}? {listed})"
        meant = f": did you mean {guess!r}?" if guess else f"; {listed}"
        return f" (a server's tools are named SERVER.TOOL, as `meta-agent tools` lists them{meant})"
    down = [status for status in children if status.state != "ready" and may_name_server(pattern, status.name)]
    if down:
        return f" ({'; '.join(_not_ready(status) for status in down)})"
    guess = _dotted_guess(pattern, tools, servers)
    return f" (did you mean {guess!r}? {listed})" if guess else f" ({listed})"


def _undotted_guess(pattern: str, tools: Sequence[ToolSpec], servers: Sequence[str]) -> str | None:
    """`time` → `time.*`; `get_current_time` → `time.get_current_time`; `read_reslt` → `read_result`."""
    if any(fnmatch.fnmatchcase(server, pattern) for server in servers):
        return f"{pattern}.*"
    named = [spec.name for spec in tools if spec.server and fnmatch.fnmatchcase(spec.tool, pattern)]
    if named:
        return named[0]
    if len(servers) == 1 and not any(spec.server for spec in tools):  # its tools unknown yet: only its name
        return f"{servers[0]}.{pattern}"
    close = _close(pattern, [spec.tool for spec in tools])
    return None if close is None else next(spec.name for spec in tools if spec.tool == close)


def _dotted_guess(pattern: str, tools: Sequence[ToolSpec], servers: Sequence[str]) -> str | None:
    """The pattern with its server's name and then its tool's own name made the closest that match something (`tme.*`
    → `time.*`), if that pattern matches a tool."""
    server, _, tool = pattern.partition(".")
    if not any(fnmatch.fnmatchcase(name, server) for name in servers):
        server = _close(server, servers) or server
    own = [spec.tool for spec in tools if spec.server and fnmatch.fnmatchcase(spec.server, server)]
    if not any(fnmatch.fnmatchcase(name, tool) for name in own):
        tool = _close(tool, own) or tool
    guess = f"{server}.{tool}"
    if guess == pattern or not any(fnmatch.fnmatchcase(spec.name, guess) for spec in tools):
        return None
    return guess


def _close(name: str, known: Sequence[str]) -> str | None:
    close = difflib.get_close_matches(name, list(dict.fromkeys(known)), n=1, cutoff=CLOSE)
    return close[0] if close else None


def _not_ready(status: ChildStatus) -> str:
    if status.state == "starting":
        return f"server {status.name!r} is still starting"
    return f"server {status.name!r} is {status.state}{': ' + status.error if status.error else ''}"
