"""What `meta-agent serve` and `meta-agent run` share: the children, the internal tools, the model, and how a
run is set up from a caller's arguments. `async with Engine(...)` starts the children; leaving stops them.

An engine given its `config_file` follows it while it runs (`meta-agent serve`): a change to the file, or
`request_reload()` (SIGHUP), reloads it; a valid edit starts, stops and restarts children (`ChildPool.reconcile`), an
invalid one changes nothing and is told (`config_problem`, the toolbox). Whoever shows the toolbox hears when it
changes (`on_toolbox_change`).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import structlog
from ulid import ULID

from meta_agent.children.pool import ChildPool
from meta_agent.children.questions import Questions
from meta_agent.children.supervisor import ChildServer, ChildStatus
from meta_agent.children.webhooks import Webhooks, secrets_of
from meta_agent.config.servers import DEFAULT_START_TIMEOUT, ServerEntry, load_servers, webhooks_of
from meta_agent.config.settings import Settings
from meta_agent.core import events as ev
from meta_agent.core.event_lines import describe
from meta_agent.core.events import Emit, Event
from meta_agent.core.limits import DEFAULT_PLAN_STEPS, Limits
from meta_agent.core.loop import RunRequest, run
from meta_agent.core.provider import Provider
from meta_agent.core.result import Mode, RunResult, UnavailableServer, unavailable_line
from meta_agent.core.tool_call import Approver, ArgumentCheck
from meta_agent.core.tool_search import SearchPlan, search_on
from meta_agent.core.tool_step import ToolRunner
from meta_agent.core.tools import InternalTool, ToolSpec
from meta_agent.errors import ConfigError, ConversationLost, ModelNotConfigured, PatternError
from meta_agent.internal import INTERNAL_TOOLS, LEFT_OUT, internal_tools
from meta_agent.internal.find_tools import find_tools_tool
from meta_agent.providers import Unusable, make_provider, parse_chain, resolve_provider
from meta_agent.records.telemetry import Spans
from meta_agent.records.traces import Redactor, TraceWriter, default_trace_dir, prune_traces
from meta_agent.shared.text import one_line, some_of
from meta_agent.store import trustfile
from meta_agent.store.conversations import Conversations, Turn
from meta_agent.store.conversations import default_path as default_conversations_path
from meta_agent.store.database import open_database
from meta_agent.store.run_index import RunIndex, stopping
from meta_agent.store.trustfile import Recorded
from meta_agent.toolbox.build import (
    Toolbox,
    ToolCaller,
    may_name_server,
    pinned,
    withheld_child_tools,
    withheld_webhooks,
)
from meta_agent.version import __version__

if TYPE_CHECKING:
    from meta_agent.durable.runs import DurableRuns
    from meta_agent.durable.steps import RunSteps

log = structlog.get_logger(__name__)
PREVIOUS_TURN = "the conversation's previous turn"  # what a turn queued behind another waits for
# How often a followed config file (and the trust file) is looked at; a look is one stat() of each.
FOLLOW_INTERVAL = 1.0
# A file seen changing is read once it has stayed the same this long: an editor's save can take several writes.
SETTLE_INTERVAL = 0.1


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """A run as its caller asked for it: what any replica needs to run it (again, for a durable run)."""

    run_id: str
    task: str
    mode: Mode
    patterns: list[str] | None
    limits: Limits
    conversation_id: str  # the new conversation's id, unless `continues`
    continues: bool
    can_ask: bool  # the caller can be asked to approve a call


@dataclass(frozen=True, kw_only=True)
class Caller:
    """What a run has of the caller that started it; a resumed durable run has none of it."""

    emit: Emit | None = None
    approver: Approver | None = None
    sampling: Provider | None = None
    questions: Questions | None = None


NO_CALLER = Caller()


class Engine:
    def __init__(
        self,
        settings: Settings,
        servers: Mapping[str, ServerEntry],
        environ: Mapping[str, str] = os.environ,
        *,
        restart: bool = True,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        trust_file: Path | None = None,
        provider: Provider | None = None,
        config_file: Path | None = None,
        redact: Redactor | None = None,
        serving: bool = False,
        hold_children: bool = False,
    ) -> None:
        """`environ` (the process's own unless given) holds the providers' API keys and endpoints, which traces
        redact. `trust_file` holds levels recorded with `meta-agent trust`; it is read again when it changes, and while
        it cannot be read, recorded levels stop applying (`trust_problem` says why; the toolbox shows it). `provider`,
        where given, is the model of every run instead of the one the settings name (benchmarks, embedding).
        `config_file`, where given, is the servers.json that `servers` came from, followed while the engine runs.
        `redact` hides secrets in traces (one is made from `environ`, `servers` and the HTTP token if not given); a
        reload teaches it the secrets of the servers it adds. `serving`: the engine of a server, which may run many
        calls at once: its models send requests through the vendor SDKs' aiohttp transport (`vendor_http_client`).
        `hold_children`: the children start once `pool.release()` is called (or a run needs them, or after a second;
        children/pool.py).

        Raises:
            ConfigError: META_AGENT_INTERNAL_TOOLS names an unknown tool.
        """
        self.settings = settings
        self.environ = environ
        self.internal, self.withheld = internal_tools(settings, environ)
        if settings.image_model and self.withheld.get("image_gen", LEFT_OUT) != LEFT_OUT:  # set, yet unusable
            log.warning("image_gen_withheld", reason=self.withheld["image_gen"])
        if settings.vision_model and self.withheld.get("describe_image", LEFT_OUT) != LEFT_OUT:
            log.warning("describe_image_withheld", reason=self.withheld["describe_image"])
        self.pool = ChildPool(
            servers, restart=restart, start_timeout=start_timeout, on_change=self._child_changed, held=hold_children
        )
        self.caller = ToolCaller(self.pool.children, self.internal)
        self._checks = ArgumentCheck()  # validators outlive a run: building one costs more than a step
        self._toolbox: Toolbox | None = None
        self._providers: dict[str, Provider] = {}  # the models made, by their spec ("": the one found by looking)
        self._given_provider = provider
        self._serving = serving
        self._provider_lock = anyio.Lock()
        self.trace_dir = settings.trace_dir or default_trace_dir()
        self.database = open_database(settings.database_url, settings.conversations_db or default_conversations_path())
        self.conversations = Conversations(self.database, lease_seconds=settings.lease_seconds)
        # unique to this process, even in a container restarted with the same host name and pid
        replica = f"{socket.gethostname()}:{os.getpid()}:{str(ULID())[-6:]}"
        self.runs = RunIndex(self.database, replica, alive_seconds=settings.lease_seconds)
        self.durable: DurableRuns | None = None  # with PostgreSQL: runs survive their replica (durable/runs.py)
        if settings.database_url:
            from meta_agent.durable.runs import DurableRuns

            self.durable = DurableRuns(
                settings.database_url, replica, self.runs, version=__version__, max_resumes=settings.max_resumes
            )
        self._redact = redact or Redactor.of(environ, servers, settings.http_token)
        _learn_webhook_secrets(self._redact, servers)
        self._listeners: list[Callable[[], None]] = []
        self._trust_file = trust_file
        self._trust_stamp: tuple[int, ...] | None = None
        self._recorded: dict[str, Recorded] = {}
        self.trust_problem: str | None = None  # why the trust file cannot be read, while it cannot
        self._read_trust_file(starting=True)
        self._config_file = config_file
        self._config_stamp = None if config_file is None else _stamp(config_file)
        self.config_problem: str | None = None  # why the followed config file cannot be used, while it cannot
        self._reload_now = anyio.Event()
        self._background: anyio.abc.TaskGroup | None = None  # follows the config file
        self._latest: dict[str, Event] = {}  # each running run's latest event: what it is doing (in_progress)

    async def __aenter__(self) -> Engine:
        removed = prune_traces(self.trace_dir, self.settings.trace_max_age_days)
        if removed:
            log.info("traces_pruned", removed=removed, older_than_days=self.settings.trace_max_age_days)
        await self.pool.__aenter__()
        if self.durable is not None:
            try:
                await self.durable.start(self._run)
            except BaseException:
                await self.pool.__aexit__(None, None, None)
                raise
        if self._config_file is not None:
            self._background = anyio.create_task_group()
            await self._background.__aenter__()
            self._background.start_soon(self._follow_config)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        if self._background is not None:  # it never raises: leaving it as if its body ended reports nothing
            self._background.cancel_scope.cancel()
            await self._background.__aexit__(None, None, None)
        try:
            if self.durable is not None:
                await self.durable.stop()
            for provider in self._providers.values():
                await provider.aclose()
        finally:
            self.conversations.close()
            await self.pool.__aexit__(*exc_info)

    def on_toolbox_change(self, listener: Callable[[], None]) -> None:
        """Call `listener` (at once, on the event loop; it must not raise or block) whenever the toolbox changes: a
        child starts, dies or changes its tools, the trust file or the config file changes or cannot be read."""
        self._listeners.append(listener)

    def request_reload(self) -> None:
        """Read the followed config file again now, changed or not (SIGHUP)."""
        self._reload_now.set()

    def reload_config(self) -> None:
        """Read the followed config file and make the children those it names. An invalid file changes nothing: one
        log line names the file, the JSON path and the problem, and `config_problem` says it until it is fixed."""
        assert self._config_file is not None, "reload an engine that follows a config file"
        try:
            servers = load_servers(self._config_file, self.environ)
        except ConfigError as exc:
            self.config_problem = f"{exc}; the servers configured before go on unchanged until it is fixed"
            log.warning("config_invalid", path=str(self._config_file), error=str(exc))
            self._changed()
            return
        self.config_problem = None
        self._redact.learn(servers)
        _learn_webhook_secrets(self._redact, servers)
        changes = self.pool.reconcile(servers)
        log.info(
            "config_reloaded",
            path=str(self._config_file),
            added=list(changes.added),
            removed=list(changes.removed),
            restarted=list(changes.restarted),
            webhooks_changed=list(changes.webhooks),
        )
        self._changed()

    async def _follow_config(self) -> None:
        """Reload the config file when it changes or a reload is asked for; look at the trust file as often, so
        that whoever shows the toolbox hears of a change to it too."""
        assert self._config_file is not None
        while True:
            with anyio.move_on_after(FOLLOW_INTERVAL):
                await self._reload_now.wait()
            asked, self._reload_now = self._reload_now.is_set(), anyio.Event()
            self._read_trust_file()
            if asked or _stamp(self._config_file) != self._config_stamp:
                self._config_stamp = await _settled_stamp(self._config_file)
                self.reload_config()

    def _changed(self) -> None:
        self._toolbox = None
        for listener in self._listeners:
            listener()

    def toolbox(self) -> Toolbox:
        """The current toolbox; rebuilt after a child starts, dies or restarts, or the trust file changes."""
        self._read_trust_file()
        if self._toolbox is None:
            self._toolbox = Toolbox.build(
                self.internal, self.pool, self._recorded, trust_problem=self.trust_problem, webhooks=self.pool.webhooks
            )
        return self._toolbox

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
        self._changed()

    def describe(self) -> dict[str, Any]:
        """The toolbox as JSON: each child with its status, each tool with names, annotations, trust and `enabled`;
        the tools offered first, then those withheld (`enabled: false`, `withheld` saying why), so a host's tool
        selector can show them greyed out."""
        toolbox = self.toolbox()
        return {
            "servers": [_status_json(child) for child in self.pool],
            "webhooks": _webhooks_json(self.pool.webhooks),
            "tools": [_tool_json(spec) for spec in toolbox.tools]
            + [_tool_json(spec, why) for spec, why in self.withheld_specs()],
            "problems": list(toolbox.problems) + ([self.config_problem] if self.config_problem else []),
            "trust_file": None
            if self._trust_file is None
            else {"path": str(self._trust_file), "problem": self.trust_problem},
            "config_file": None
            if self._config_file is None
            else {"path": str(self._config_file), "problem": self.config_problem},
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

    def in_progress(self) -> list[str]:
        """What each running run is doing, a line each (`01K… · step 4 · call kid.big {…}`): its latest progress line.
        Safe to read from another thread while the event loop is stalled (cli/watchdog.py)."""
        return [f"{run_id} · {describe(event) or event.kind}" for run_id, event in list(self._latest.items())]

    def internal_tool(self, name: str) -> InternalTool | None:
        return next((tool for tool in self.internal if tool.name == name), None)

    async def run(
        self,
        task: str,
        *,
        mode: Mode,
        patterns: list[str] | None = None,
        max_steps: int | None = None,
        token_budget: int | None = None,
        emit: Emit | None = None,
        approver: Approver | None = None,
        sampling: Provider | None = None,
        questions: Questions | None = None,
        conversation_id: str | None = None,
    ) -> RunResult:
        """One run of the loop with a caller's arguments.

        Turns of one conversation run one at a time: this waits while another turn of `conversation_id` runs.

        Raises:
            ConfigError: a bad argument (max_steps over the ceiling, a token budget below 1), an unknown conversation
                or one whose stored record cannot be read.
            PatternError: a `tools` pattern that is malformed or matches no tool.
            ProviderError: no model is configured, or the provider failed.
        """
        spec = RunSpec(
            run_id=str(ULID()),
            task=task,
            mode=mode,
            patterns=patterns,
            limits=self._limits(mode, max_steps, token_budget),
            conversation_id=conversation_id or str(ULID()),
            continues=conversation_id is not None,
            can_ask=approver is not None,
        )
        caller = Caller(emit=emit, approver=approver, sampling=sampling, questions=questions)
        if self.durable is not None:
            result: RunResult = await self.durable.run(spec.run_id, spec, caller)
            return result
        return await self._run(spec, caller)

    async def _run(self, spec: RunSpec, caller: Caller | None) -> RunResult:
        """The run `spec`, for `caller` (None: a durable run resumed after its replica stopped)."""
        caller = caller or NO_CALLER
        emit = caller.emit

        async def waiting(seconds: float) -> None:  # a turn queued behind another is not a hung call
            if emit is not None:
                await emit(ev.Heartbeat(step=0, waiting_for=PREVIOUS_TURN, elapsed_s=seconds, run_id=spec.run_id))

        existing = spec.conversation_id if spec.continues else None
        # running from the start: a run waiting for its turn of the conversation, or for its children, is one
        async with self.runs.running(spec.run_id, spec.mode, spec.task):
            if stopping():  # a run handed to this process as it stops: left, as interrupted, for another replica
                await anyio.sleep_forever()
            async with self.conversations.turn(existing, new_id=spec.conversation_id, waiting=waiting) as turn:
                steps = None if self.durable is None else await self.durable.steps(can_ask=spec.can_ask)
                return await self._run_turn(turn, spec, caller, steps)

    async def _run_turn(self, turn: Turn, spec: RunSpec, caller: Caller, steps: RunSteps | None) -> RunResult:
        """`run`, within its turn of the conversation (`turn.history`: the transcript so far); each model turn,
        tool call and approval a step of `steps` where the run is durable."""
        mode, patterns, emit = spec.mode, spec.patterns, caller.emit
        # a resumed run continues from the history its first start read, whatever was saved since; a new conversation
        # has none to read (a step is two transactions: not spent on an empty history)
        if steps is None or not spec.continues:
            history = turn.history
        else:
            history = await steps.once("history", _same, turn.history)
        moved_on = history != turn.history  # resumed after another turn of its conversation was saved: not saved
        provider, *fallbacks = await self._models(caller.sampling)
        # Only the children this run can use: a child still starting would be missing from its tools. Those not
        # ready once the wait is over are left out, and the run says so (its first event, its result).
        needed = self._children_needed(patterns, mode)
        await self.pool.wait_settled(needed)
        unavailable = self._unavailable(needed)
        tools = tuple(self.select(patterns, mode))
        search = None
        if search_on(self.settings.tool_search, mode, len(tools)):  # find_tools first, the pinned tools beside it
            finder = find_tools_tool()
            found = Toolbox.build([finder], (), self._recorded, trust_problem=self.trust_problem).tools[0]
            search = SearchPlan(finder=finder, shown=frozenset({found.name, *pinned(self.pool, tools)}))
            tools = (found, *tools)
        request = RunRequest(
            task=spec.task,
            mode=mode,
            tools=tools,
            search=search,
            limits=spec.limits,
            history=history,
            run_id=spec.run_id,
            max_result_chars=self.settings.result_inline_chars,
            elapsed=None if steps is None else steps.elapsed,
            unavailable_servers=unavailable,
        )
        runner: ToolRunner = self.caller
        if caller.questions is not None:
            runner = ToolCaller(self.pool.children, self.internal, caller.questions)
        approver = caller.approver
        if steps is not None:
            provider, fallbacks = steps.model(provider), [steps.model(model) for model in fallbacks]
            runner, approver = steps.tools(runner), steps.approver(approver)
        trace = TraceWriter(self.trace_dir, self._redact)
        noted = None if self.durable is None else self.durable.noting(request.run_id)
        sinks = [sink for sink in (emit, trace, Spans(), noted) if sink is not None]

        async def fan_out(event: Event) -> None:
            self._latest[request.run_id] = event
            for sink in sinks:
                await sink(event)

        with structlog.contextvars.bound_contextvars(run_id=request.run_id):
            # the servers it goes without, also in the server's log (the progress and the live view say them too)
            not_ready = {"not_ready": unavailable_line(unavailable)} if unavailable else {}
            log.info("run_started", mode=mode, model=provider.name, tools=len(request.tools), **not_ready)
            try:
                result = await run(
                    request,
                    provider=provider,
                    fallbacks=fallbacks,
                    tools=runner,
                    approver=approver,
                    emit=fan_out,
                    checks=self._checks,
                )
            finally:
                self._latest.pop(request.run_id, None)
                with anyio.CancelScope(shield=True):  # the trace is whole on disk before the result is returned
                    await trace.aclose()
            result = await self._remember(result, turn, steps, moved_on=moved_on)
            await self.runs.finished(request.run_id, result.to_json())
            usage = result.usage
            log.info(
                "run_finished",
                stop_reason=result.stop_reason,
                model_calls=usage.model_calls,
                tool_calls=usage.tool_calls,
                tokens=usage.input_tokens + usage.output_tokens,
            )
        return result

    async def _remember(
        self, result: RunResult, turn: Turn, steps: RunSteps | None, *, moved_on: bool = False
    ) -> RunResult:
        """The result with the conversation it continues. A turn that cannot be saved (a store that cannot be
        written, a hold lost to another process, a conversation that `moved_on` while the durable run was
        interrupted) keeps its answer, with no conversation id and `conversation_error` saying why in one line."""
        if steps is None:
            trimmed, error = await self._save(turn, result)
        else:  # saved once: a replay past it does not write the conversation again
            trimmed, error = await steps.once("conversation", self._save, turn, result, moved_on)
        if error is None:
            return dataclasses.replace(result, conversation_id=turn.conversation_id, conversation_trimmed=trimmed)
        log.warning("conversation_not_saved", path=self.database.label, error=error)
        return dataclasses.replace(result, conversation_error=error)

    async def _save(self, turn: Turn, result: RunResult, moved_on: bool = False) -> tuple[int, str | None]:
        """Save the turn: how many of its oldest turns were dropped, or why it was not saved (one line)."""
        if moved_on:  # saving would drop the turns saved since this run read its history
            return 0, MOVED_ON
        try:
            return await self.conversations.save(turn, result.transcript), None
        except (ConversationLost, ConfigError) as exc:
            error = str(exc)
        except self.database.errors as exc:
            error = f"{self.database.label}: cannot write the conversations store: {exc}; this turn was not saved"
        except (ValueError, RecursionError) as exc:
            error = f"this turn cannot be stored as JSON ({type(exc).__name__}: {exc}); it was not saved"
        return 0, one_line(error)  # whatever the error said

    def select(self, patterns: list[str] | None, mode: Mode) -> list[ToolSpec]:
        """The tools of `mode` that `patterns` pick.

        Raises:
            PatternError: a malformed pattern, or one that matches no tool of the toolbox.
        """
        toolbox = self.toolbox()
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

    def _children_needed(self, patterns: list[str] | None, mode: Mode) -> list[str]:
        """The enabled children whose tools a run may use: none in ask mode (internal tools only), else each child
        that one of `patterns` can name (every one without patterns).

        Raises:
            PatternError: a malformed pattern (said before waiting for anything).
        """
        self.toolbox().select(patterns, mode=mode)  # checks each pattern
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

    async def _models(self, sampling: Provider | None) -> tuple[Provider, ...]:
        """The run's model, then the rest of its fallback chain. The host's model where it is asked for (`sampling`
        in META_AGENT_MODEL) or nothing else is set; the others made once and kept (a sampling provider belongs to
        one call and is never kept). In a chain, a model that cannot be made here is `Unusable`: the chain passes it.

        Raises:
            ModelNotConfigured: no usable model, or a malformed META_AGENT_MODEL, saying what to set.
        """
        if self._given_provider is not None:
            return (self._given_provider,)
        spec = (self.settings.model or "").strip()
        if not spec:
            return (sampling if sampling is not None else await self._made(""),)
        chain = parse_chain(spec)
        models = []
        for member in chain:
            try:
                models.append(await self._made(member, sampling))
            except ModelNotConfigured as exc:
                if len(chain) == 1:
                    raise
                models.append(Unusable(member, str(exc)))
        return tuple(models)

    async def _made(self, spec: str, sampling: Provider | None = None) -> Provider:
        """The provider `spec` names ("": the one `resolve_provider` finds), made once and kept; `sampling` is the
        caller's own.

        Raises:
            ModelNotConfigured: it cannot be made here.
        """
        if spec == "sampling":
            return make_provider("sampling", self.environ, sampling=sampling)
        async with self._provider_lock:  # two first calls at once must not make (and leak) two clients
            if spec not in self._providers:
                self._providers[spec] = await resolve_provider(
                    spec or None,
                    self.environ,
                    timeout=self.settings.model_timeout,
                    openai_api=self.settings.openai_api,
                    aiohttp=self._serving,
                )
        return self._providers[spec]

    def _limits(self, mode: Mode, max_steps: int | None, token_budget: int | None) -> Limits:
        ceiling = self.settings.max_steps_ceiling
        if max_steps is not None and not 1 <= max_steps <= ceiling:
            raise ConfigError(f"max_steps: {max_steps} is outside 1..{ceiling} (META_AGENT_MAX_STEPS_CEILING)")
        if token_budget is not None and token_budget < 1:
            raise ConfigError(f"token_budget: {token_budget} must be at least 1")
        default = {"ask": 1, "plan": min(DEFAULT_PLAN_STEPS, ceiling), "agent": self.settings.max_steps}[mode]
        return Limits(
            max_steps=1 if mode == "ask" else (max_steps or default),
            token_budget=token_budget or self.settings.token_budget,
            time_limit=self.settings.time_limit,
        )

    def _why_missing(self, pattern: str, mode: Mode) -> str:
        if "__" in pattern and "." not in pattern:  # the model's name of a tool (server__tool), not its own
            dotted = pattern.replace("__", ".", 1)
            return f" (tools are named SERVER.TOOL, as `meta-agent tools` lists them: did you mean {dotted!r}?)"
        if mode == "ask":
            internal = ", ".join(spec.name for spec in self.toolbox().select(None, mode="ask")) or "none is enabled"
            return f" of ask mode, which uses internal tools only ({internal})"
        down = [child.status for child in self.pool if child.status.state != "ready"]
        down = [status for status in down if may_name_server(pattern, status.name)]
        if down:
            return f" ({'; '.join(_not_ready(status) for status in down)})"
        names = some_of([spec.name for spec in self.toolbox().tools], 12)
        return f" (the tools are: {names})" if names else " (there are no tools)"

    def _child_changed(self, _child: ChildServer) -> None:
        self._changed()


MOVED_ON = (
    "the conversation moved on while this run was interrupted (a later turn was saved first); this turn was not saved"
)


def _same(value: Any) -> Any:
    return value


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


def _not_ready(status: ChildStatus) -> str:
    if status.state == "starting":
        return f"server {status.name!r} is still starting"
    return f"server {status.name!r} is {status.state}{': ' + status.error if status.error else ''}"


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


def _learn_webhook_secrets(redact: Redactor, servers: Mapping[str, ServerEntry]) -> None:
    """Teach `redact` (the traces') the webhooks' secrets: their URL paths and queries and their header values (a
    token expanded from `${VAR}`), as it learns a server's."""
    redact.learn_values(secrets_of(webhooks_of(servers)))


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
