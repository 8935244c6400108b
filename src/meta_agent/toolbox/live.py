"""The live toolbox: the toolbox of the children as they are now, which follows servers.json and the trust file,
describes itself (the resource meta-agent://toolbox, `meta-agent tools`) and selects the tools of a run.

A toolbox given its `config_file` follows it (`meta-agent serve`): a change to the file, or `request_reload()`
(SIGHUP), reloads it; a valid edit starts, stops and restarts children (`ChildPool.reconcile`), an invalid one changes
nothing and is told (`config_problem`, the toolbox). A server that started on a file it could not use has no children
until the file is fixed, and says so the same way. Whoever shows the toolbox hears when it changes (`on_change`).
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import anyio
import structlog

from meta_agent.children.pool import ChildPool
from meta_agent.children.questions import Questions
from meta_agent.children.supervisor import ChildServer, ChildStatus
from meta_agent.children.webhooks import Webhooks, secrets_of
from meta_agent.config.servers import ServerEntry, load_servers, webhooks_of
from meta_agent.core.result import Mode, UnavailableServer
from meta_agent.core.tool_search import SearchPlan, search_on
from meta_agent.core.tools import InternalTool, ToolSpec
from meta_agent.errors import ConfigError, PatternError
from meta_agent.internal import INTERNAL_TOOLS
from meta_agent.internal.find_tools import find_tools_tool
from meta_agent.records.traces import Redactor
from meta_agent.shared.text import one_line, some_of
from meta_agent.store import trustfile
from meta_agent.store.preferences import NONE, Preferences
from meta_agent.store.trustfile import Recorded
from meta_agent.toolbox.build import (
    Toolbox,
    ToolCaller,
    may_name_server,
    pinned,
    withheld_child_tools,
    withheld_webhooks,
)
from meta_agent.toolbox.missing import why_missing

log = structlog.get_logger(__name__)
# How often a followed config file (and the trust file) is looked at; a look is one stat() of each.
FOLLOW_INTERVAL = 1.0
# A file seen changing is read once it has stayed the same this long: an editor's save can take several writes.
SETTLE_INTERVAL = 0.1
RunTools = tuple[tuple[ToolSpec, ...], SearchPlan | None, tuple[UnavailableServer, ...]]


class LiveToolbox:
    def __init__(
        self,
        pool: ChildPool,
        internal: Sequence[InternalTool],
        withheld: Mapping[str, str],
        redact: Redactor,
        environ: Mapping[str, str],
        *,
        trust_file: Path | None = None,
        config_file: Path | None = None,
        config_problem: str | None = None,
    ) -> None:
        """`internal`: the internal tools offered, `withheld` those not, with why. `redact` learns the secrets of the
        servers a reload adds. `trust_file` holds levels recorded with `meta-agent trust`; it is read again when it
        changes, and while it cannot be read, recorded levels stop applying (`trust_problem` says why; the toolbox
        shows it). `config_file` is the servers.json the pool's servers came from, followed from `follow()`; or, with
        `config_problem` (why it could not be used), the file to follow until it can be, the pool empty meanwhile."""
        self.pool = pool
        self.internal = internal
        self.withheld = withheld
        self.environ = environ
        self.caller = ToolCaller(pool.children, internal)
        self._redact = redact
        self._toolbox: Toolbox | None = None
        self._listeners: list[Callable[[], None]] = []
        self._trust_file = trust_file
        self._trust_stamp: tuple[int, ...] | None = None
        self._recorded: dict[str, Recorded] = {}
        self.trust_problem: str | None = None  # why the trust file cannot be read, while it cannot
        self._read_trust_file(starting=True)
        self.config_file = config_file
        self._config_stamp = None if config_file is None else _stamp(config_file)
        self.config_problem: str | None = None  # why the followed config file cannot be used, while it cannot
        self._loaded = config_problem is None  # whether children ever came from the file
        if config_problem is not None:
            self._unusable(config_problem)
        self._reload_now = anyio.Event()

    def __call__(self) -> Toolbox:
        """The current toolbox; rebuilt after a child starts, dies or restarts, or the trust file changes."""
        self._read_trust_file()
        if self._toolbox is None:
            self._toolbox = Toolbox.build(
                self.internal, self.pool, self._recorded, trust_problem=self.trust_problem, webhooks=self.pool.webhooks
            )
        return self._toolbox

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call `listener` (at once, on the event loop; it must not raise or block) whenever the toolbox changes: a
        child starts, dies or changes its tools, the trust file or the config file changes or cannot be read."""
        self._listeners.append(listener)

    def changed(self, _child: ChildServer | None = None) -> None:
        """The toolbox is no longer what it was (a child changed, or a file): it is rebuilt when next asked for."""
        self._toolbox = None
        for listener in self._listeners:
            listener()

    def request_reload(self) -> None:
        """Read the followed config file again now, changed or not (SIGHUP)."""
        self._reload_now.set()

    def reload_config(self) -> None:
        """Read the followed config file and make the children those it names. An invalid file changes nothing: one
        log line names the file, the JSON path and the problem, and `config_problem` says it until it is fixed."""
        assert self.config_file is not None, "reload a toolbox that follows a config file"
        try:
            servers = load_servers(self.config_file, self.environ)
        except ConfigError as exc:
            self._unusable(str(exc))
            self.changed()
            return
        self.config_problem = None
        self._loaded = True
        self._redact.learn(servers)
        learn_webhook_secrets(self._redact, servers)
        changes = self.pool.reconcile(servers)
        log.info(
            "config_reloaded",
            path=str(self.config_file),
            added=list(changes.added),
            removed=list(changes.removed),
            restarted=list(changes.restarted),
            webhooks_changed=list(changes.webhooks),
        )
        self.changed()

    def _unusable(self, problem: str) -> None:
        """The followed config file cannot be used, for `problem` (one line naming it): said in `config_problem`
        with what that means for the children, and logged."""
        self.config_problem = config_unusable(problem, loaded=self._loaded)
        log.warning("config_invalid", path=str(self.config_file), error=problem)

    def problems(self) -> list[str]:
        """What keeps the toolbox from being what its files say, one line each: the trust file, servers.json."""
        return list(self().problems) + ([self.config_problem] if self.config_problem else [])

    async def follow(self) -> None:
        """Reload the config file when it changes or a reload is asked for; look at the trust file as often, so
        that whoever shows the toolbox hears of a change to it too. Runs until cancelled."""
        assert self.config_file is not None
        while True:
            with anyio.move_on_after(FOLLOW_INTERVAL):
                await self._reload_now.wait()
            asked, self._reload_now = self._reload_now.is_set(), anyio.Event()
            self._read_trust_file()
            if asked or _stamp(self.config_file) != self._config_stamp:
                self._config_stamp = await _settled_stamp(self.config_file)
                self.reload_config()

    def _read_trust_file(self, *, starting: bool = False) -> None:
        """Read the trust file again if it changed. One that cannot be read fails closed (README, Trust and approval):
        the levels last read may still lower a tool's trust, never raise it, until it is fixed."""
        if self._trust_file is None:
            return
        stamp = _stamp(self._trust_file)
        if stamp == self._trust_stamp:
            return
        try:
            self._recorded = trustfile.load(self._trust_file)
            self.trust_problem = None
        except ConfigError as exc:
            self.trust_problem = f"{exc}; recorded trust levels do not apply until it is fixed"
            if not starting:  # at the start the owner says it (the command line refuses to serve with it)
                log.warning("trust_file_unreadable", path=str(self._trust_file), error=str(exc))
        self._trust_stamp = stamp
        self.changed()

    def describe(self) -> dict[str, Any]:
        """The toolbox as JSON: each child with its status, each tool with names, annotations, trust and `enabled`;
        the tools offered first, then those withheld (`enabled: false`, `withheld` saying why), so a host's tool
        selector can show them greyed out."""
        toolbox = self()
        return {
            "servers": [_status_json(child) for child in self.pool],
            "webhooks": _webhooks_json(self.pool.webhooks),
            "tools": [_tool_json(spec) for spec in toolbox.tools]
            + [_tool_json(spec, why) for spec, why in self.withheld_specs()],
            "problems": self.problems(),
            "trust_file": None
            if self._trust_file is None
            else {"path": str(self._trust_file), "problem": self.trust_problem},
            "config_file": None
            if self.config_file is None
            else {"path": str(self.config_file), "problem": self.config_problem},
        }

    def withheld_specs(self) -> list[tuple[ToolSpec, str]]:
        """Every tool known but withheld, as the toolbox would list it, with why in one line: internal tools switched
        off or without a backend (`self.withheld`), then each child's tools that `tools.allow`/`tools.deny` filter
        out or that it listed before it went down, then the disabled webhooks. The loop never sees them."""
        declared = [tool for tool in INTERNAL_TOOLS if tool.name in self.withheld]
        internal = Toolbox.build(declared, (), self._recorded, trust_problem=self.trust_problem).tools
        children = withheld_child_tools(self.pool, self._recorded, trust_problem=self.trust_problem)
        webhooks = withheld_webhooks(self.pool.webhooks, self._recorded, trust_problem=self.trust_problem)
        return [(spec, self.withheld[spec.name]) for spec in internal] + children + webhooks

    def internal_tool(self, name: str) -> InternalTool | None:
        return next((tool for tool in self.internal if tool.name == name), None)

    def internal_spec(self, tool: InternalTool) -> ToolSpec:
        """A tool made for one run (find_tools, run_code) as the toolbox holds it: its alias and trust level."""
        return Toolbox.build([tool], (), self._recorded, trust_problem=self.trust_problem).tools[0]

    def runner(self, questions: Questions | None) -> ToolCaller:
        """What calls a run's tools: the shared one, or one that hands the children's questions to the caller."""
        return self.caller if questions is None else ToolCaller(self.pool.children, self.internal, questions)

    async def for_run(
        self,
        patterns: list[str] | None,
        mode: Mode,
        tool_search: Literal["auto", "on", "off"],
        chosen: Preferences = NONE,
    ) -> RunTools:
        """The tools of a run, find_tools first where the run searches them (`tool_search`, META_AGENT_TOOL_SEARCH),
        the plan of that search, and the servers the run goes without. Only the children this run can use are waited
        for: a child still starting would be missing from its tools. Those not ready once the wait is over are left
        out, and the run says so (its first event, its result). What its subject `chosen` in the tool selector
        applies: the tools it switched off are left out, its trust levels replace the toolbox's below an operator's
        `never`.

        Raises:
            PatternError: a `tools` pattern that is malformed, matches no tool, or only tools switched off.
        """
        needed = self._children_needed(patterns, mode)
        await self.pool.wait_settled(needed)
        if mode != "ask" and self._unmatched(patterns):  # the error to come names every child's tools: start them
            await self.pool.wait_settled(child.name for child in self.pool if not child.entry.disabled)
        unavailable = self._unavailable(needed)
        tools = tuple(as_chosen(self.select(patterns, mode), patterns, chosen))
        search = None
        # find_tools first, the pinned tools beside it; not for a subject that switched it off
        if search_on(tool_search, mode, len(tools)) and "find_tools" not in chosen.off:
            finder = find_tools_tool()
            found = self.internal_spec(finder)
            search = SearchPlan(finder=finder, shown=frozenset({found.name, *pinned(self.pool, tools)}))
            tools = (found, *tools)
        return tools, search, unavailable

    def select(self, patterns: list[str] | None, mode: Mode) -> list[ToolSpec]:
        """The tools of `mode` that `patterns` pick.

        Raises:
            PatternError: a malformed pattern, or one that matches no tool of the toolbox.
        """
        toolbox = self()
        chosen = toolbox.select(patterns, mode=mode)
        # ask waits for no child, so its patterns are checked against the tools it can see, whatever has started.
        candidates = toolbox.select(None, mode="ask") if mode == "ask" else toolbox.tools
        for pattern in patterns or ():
            if not any(fnmatch.fnmatchcase(spec.name, pattern) for spec in candidates):
                raise PatternError(f"tools: pattern {pattern!r} matches no tool{self._why_missing(pattern, mode)}")
            if mode == "plan" and not any(fnmatch.fnmatchcase(spec.name, pattern) for spec in chosen):
                withheld = [spec.name for spec in candidates if fnmatch.fnmatchcase(spec.name, pattern)]
                raise PatternError(
                    f"tools: pattern {pattern!r} matches only tools plan mode withholds, as they may change things "
                    f"({some_of(withheld, 6)}); plan uses read-only tools"
                )
        return chosen

    def _unmatched(self, patterns: list[str] | None) -> bool:
        """Whether a pattern of `patterns` matches no tool known now."""
        names = [spec.name for spec in self().tools]
        return any(not any(fnmatch.fnmatchcase(name, pattern) for name in names) for pattern in patterns or ())

    def _children_needed(self, patterns: list[str] | None, mode: Mode) -> list[str]:
        """The enabled children whose tools a run may use: none in ask mode (internal tools only), else each child
        that one of `patterns` can name (every one without patterns).

        Raises:
            PatternError: a malformed pattern (said before waiting for anything).
        """
        self().select(patterns, mode=mode)  # checks each pattern
        if mode == "ask":
            return []
        return [
            child.name
            for child in self.pool
            if not child.entry.disabled
            and (patterns is None or any(may_name_server(pattern, child.name) for pattern in patterns))
        ]

    def _unavailable(self, names: list[str]) -> tuple[UnavailableServer, ...]:
        """The children of `names` that are not ready (after the run's wait for them), each with why in one line. A
        child still starting once that wait is over is one too: its tools are not in the run."""
        children = {child.name: child for child in self.pool}  # a reload meanwhile may have removed one
        statuses = [children[name].status for name in names if name in children]
        return tuple(
            UnavailableServer(server=status.name, status=status.state, reason=_why_not_ready(status))
            for status in statuses
            if status.state in ("failed", "restarting", "starting")
        )

    def _why_missing(self, pattern: str, mode: Mode) -> str:
        toolbox = self()
        children = [child.status for child in self.pool]
        return why_missing(pattern, mode, toolbox.tools, toolbox.select(None, mode="ask"), children)


def config_unusable(problem: str, *, loaded: bool) -> str:
    """A servers.json that cannot be used for `problem` (one line naming it), with what that means for the children:
    those of its last good state go on (`loaded`), else there are none."""
    if loaded:
        return f"{problem}; the servers configured before go on unchanged until it is fixed"
    return f"{problem}; meta-agent runs with no child servers until it is fixed"


def as_chosen(tools: Sequence[ToolSpec], patterns: list[str] | None, chosen: Preferences) -> list[ToolSpec]:
    """`tools` as a subject `chosen` them: those it switched off left out, its own trust level on the others (an
    operator's `never` stays).

    Raises:
        PatternError: a pattern of `patterns` names only tools the subject switched off.
    """
    kept = [spec for spec in tools if spec.name not in chosen.off]
    for pattern in patterns or ():
        if not any(fnmatch.fnmatchcase(spec.name, pattern) for spec in kept):
            off = [spec.name for spec in tools if fnmatch.fnmatchcase(spec.name, pattern)]
            raise PatternError(
                f"tools: pattern {pattern!r} matches only tools switched off in the tool selector "
                f"({some_of(off, 6)}); switch them on there"
            )
    return [own_trust(spec, chosen) for spec in kept]


def own_trust(spec: ToolSpec, chosen: Preferences) -> ToolSpec:
    """`spec` with the trust level its subject `chosen`, unless the operator's is `never`; where the choices could not
    be read, at most `ask`."""
    if chosen.unreadable and spec.trust == "always":
        return dataclasses.replace(
            spec, trust="ask", trust_source="at most ask: the tool selector's choices cannot be read"
        )
    level = chosen.trust.get(spec.name)
    if level is None or spec.trust == "never" or level == spec.trust:
        return spec
    return dataclasses.replace(spec, trust=level, trust_source=f"your choice in the tool selector (was {spec.trust})")


def learn_webhook_secrets(redact: Redactor, servers: Mapping[str, ServerEntry]) -> None:
    """Teach `redact` (the traces') the webhooks' secrets: their URL paths and queries and their header values (a
    token expanded from `${VAR}`), as it learns a server's."""
    redact.learn_values(secrets_of(webhooks_of(servers)))


def _stamp(path: Path) -> tuple[int, ...] | None:
    """What changes when the file is written or replaced (None: there is none). The size and inode too, as two
    writes within one tick of the file system's clock leave the modification time alone."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


async def _settled_stamp(path: Path) -> tuple[int, ...] | None:
    """The file's stamp once two looks `SETTLE_INTERVAL` apart agree (a save in progress is not read half-way)."""
    stamp = _stamp(path)
    while True:
        await anyio.sleep(SETTLE_INTERVAL)
        again = _stamp(path)
        if again == stamp:
            return stamp
        stamp = again


def _why_not_ready(status: ChildStatus) -> str:
    """Why a child is not ready, in one line, as `meta-agent check` says it."""
    if status.state == "starting":
        return "still starting when the run began"
    return one_line(status.error or f"the server is {status.state}")


def _tool_json(spec: ToolSpec, withheld: str | None = None) -> dict[str, Any]:
    return {
        "name": spec.name,
        "alias": spec.alias,
        "server": spec.server,
        "title": spec.hints.title,
        "description": spec.description,
        "annotations": spec.hints.as_annotations(),
        "trust": spec.trust,
        "trust_source": spec.trust_source,
        "enabled": withheld is None,
        "withheld": withheld,
    }


def _webhooks_json(webhooks: Webhooks) -> list[dict[str, Any]]:
    """Each webhook's tool, method, origin (never the path or query, which may be its secret), timeout and trust set."""
    return [
        {
            "name": name,
            "tool": f"{webhooks.name}.{name}",
            "method": entry.method,
            "origin": None if entry.disabled else entry.origin,
            "timeout": entry.timeout,
            "enabled": not entry.disabled,
        }
        for name, entry in webhooks.entries.items()
    ]


def _status_json(child: ChildServer) -> dict[str, Any]:
    status = child.status
    return {
        "name": status.name,
        "transport": status.transport,
        "status": status.state,
        "protocol_version": status.protocol_version,
        "server_info": {"name": status.server_name, "version": status.server_version},
        "tool_count": status.tool_count,
        "start_seconds": status.start_seconds,
        "attempt": status.attempt,
        "restarts": status.restarts,
        "error": status.error,
    }
