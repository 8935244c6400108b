"""The engine, the composition root of what `meta-agent serve` and `meta-agent run` share: it builds the parts and
wires them, enters them and exits them, and does none of their jobs. `async with Engine(...)` starts the children;
leaving stops them.

The parts, each an attribute: `pool` (the children, children/pool.py), `toolbox` (the live toolbox: follows
servers.json and the trust file, describes and selects, toolbox/live.py), `models` (the model chain,
providers/chain.py), the state store (`database`, `conversations`, the run `index`, store/), `durable` (durable
execution with PostgreSQL, durable/runs.py) and `runs` (a run from a caller's arguments, engine/runs.py). Whoever
shows the toolbox hears when it changes (`toolbox.on_change`).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import structlog
from ulid import ULID

from meta_agent.children.pool import ChildPool
from meta_agent.children.questions import Questions
from meta_agent.children.supervisor import ChildServer
from meta_agent.config.servers import DEFAULT_START_TIMEOUT, ServerEntry
from meta_agent.config.settings import Settings
from meta_agent.core.events import Emit
from meta_agent.core.provider import Provider
from meta_agent.core.result import Mode, RunResult
from meta_agent.core.tool_call import Approver
from meta_agent.engine.runs import Caller, Runs
from meta_agent.internal import LEFT_OUT, internal_tools
from meta_agent.providers.chain import ModelChain
from meta_agent.records.traces import Redactor, default_trace_dir, prune_traces
from meta_agent.store.conversations import Conversations
from meta_agent.store.conversations import default_path as default_conversations_path
from meta_agent.store.database import LOCAL_OWNER, open_database
from meta_agent.store.run_index import RunIndex
from meta_agent.toolbox.live import LiveToolbox, learn_webhook_secrets

if TYPE_CHECKING:
    from meta_agent.durable.runs import DurableRuns

log = structlog.get_logger(__name__)


class Engine:
    """What `meta-agent serve` and `meta-agent run` share: the child servers, the toolbox, the model, the records.

    An async context manager: entering it starts the children (in the background) and, with a `config_file`, follows
    that file; leaving it stops every child's processes and closes the state store. `run` runs one task.

        async with Engine(Settings(), load_servers(Path("servers.json"), os.environ)) as engine:
            result = await engine.run("What time is it in Tokyo?", mode="agent")
    """

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
        config_problem: str | None = None,
        redact: Redactor | None = None,
        serving: bool = False,
        hold_children: bool = False,
    ) -> None:
        """Make the engine; nothing starts until it is entered.

        Args:
            settings: the `META_AGENT_*` settings (`load_settings()`, or `Settings(...)`).
            servers: the child servers by name (`load_servers(path, environ)`); `{}` for none.
            environ: the process's own unless given; holds the providers' API keys and endpoints, which traces redact.
            restart: restart a child that dies, with backoff (the one-shot commands pass False).
            start_timeout: seconds a run waits for a child still starting.
            trust_file: the levels recorded with `meta-agent trust`; read again when it changes, and while it cannot
                be read, recorded levels stop applying (`toolbox.trust_problem` says why; the toolbox shows it).
            provider: where given, the model of every run instead of the one the settings name.
            config_file: where given, the servers.json that `servers` came from, followed while the engine runs.
            config_problem: why `config_file` could not be used (`servers` is then empty): said by the toolbox
                (`toolbox.config_problem`) until the file, followed meanwhile, can be used.
            redact: hides secrets in traces (made from `environ`, `servers` and the HTTP token if not given); a
                reload teaches it the secrets of the servers it adds.
            serving: the engine of a server, which may run many calls at once: its models send requests through
                the vendor SDKs' aiohttp transport (`vendor_http_client`).
            hold_children: the children start once `pool.release()` is called (or a run needs them, or after a
                second; children/pool.py).

        Raises:
            ConfigError: META_AGENT_INTERNAL_TOOLS names an unknown tool.
        """
        self.settings = settings
        self.environ = environ
        internal, withheld = internal_tools(settings, environ)
        if settings.image_model and withheld.get("image_gen", LEFT_OUT) != LEFT_OUT:  # set, yet unusable
            log.warning("image_gen_withheld", reason=withheld["image_gen"])
        if settings.vision_model and withheld.get("describe_image", LEFT_OUT) != LEFT_OUT:
            log.warning("describe_image_withheld", reason=withheld["describe_image"])
        self.pool = ChildPool(
            servers, restart=restart, start_timeout=start_timeout, on_change=self._child_changed, held=hold_children
        )
        redact = redact or Redactor.of(environ, servers, settings.http_token)
        learn_webhook_secrets(redact, servers)
        self.toolbox = LiveToolbox(
            self.pool,
            internal,
            withheld,
            redact,
            environ,
            trust_file=trust_file,
            config_file=config_file,
            config_problem=config_problem,
        )
        self.models = ModelChain(
            settings.model,
            environ,
            timeout=settings.model_timeout,
            openai_api=settings.openai_api,
            aiohttp=serving,
            given=provider,
        )
        self.database = open_database(settings.database_url, settings.conversations_db or default_conversations_path())
        self.conversations = Conversations(self.database, lease_seconds=settings.lease_seconds)
        # unique to this process, even in a container restarted with the same host name and pid
        replica = f"{socket.gethostname()}:{os.getpid()}:{str(ULID())[-6:]}"
        self.index = RunIndex(self.database, replica, alive_seconds=settings.lease_seconds)
        self.durable: DurableRuns[Caller] | None = None  # with PostgreSQL: runs survive their replica
        if settings.database_url:
            from meta_agent.durable.runs import DurableRuns

            self.durable = DurableRuns(settings.database_url, replica, self.index, max_resumes=settings.max_resumes)
        self.trace_dir = settings.trace_dir or default_trace_dir()
        self.runs = Runs(
            settings,
            self.toolbox,
            self.models,
            self.database,
            self.conversations,
            self.index,
            durable=self.durable,
            redact=redact,
            trace_dir=self.trace_dir,
        )
        self._background: anyio.abc.TaskGroup | None = None  # follows the config file

    async def __aenter__(self) -> Engine:
        removed = prune_traces(self.trace_dir, self.settings.trace_max_age_days)
        if removed:
            log.info("traces_pruned", removed=removed, older_than_days=self.settings.trace_max_age_days)
        await self.pool.__aenter__()
        if self.durable is not None:
            try:
                await self.durable.start(self.runs.body)
            except BaseException:
                await self.pool.__aexit__(None, None, None)
                raise
        if self.toolbox.config_file is not None:
            self._background = anyio.create_task_group()
            await self._background.__aenter__()
            self._background.start_soon(self.toolbox.follow)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        if self._background is not None:  # it never raises: leaving it as if its body ended reports nothing
            self._background.cancel_scope.cancel()
            await self._background.__aexit__(None, None, None)
        try:
            if self.durable is not None:
                await self.durable.stop()
            await self.models.aclose()
        finally:
            self.conversations.close()
            await self.pool.__aexit__(*exc_info)

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
        run_id: str | None = None,
        owner: str = LOCAL_OWNER,
        call_key: str | None = None,
        code: bool | None = None,
    ) -> RunResult:
        """One run of the loop with a caller's arguments.

        Turns of one conversation run one at a time: this waits while another turn of `conversation_id` runs.

        Args:
            task: what the run is to do, in the user's words.
            mode: `agent` (tools, many steps), `plan` (read-only tools, a numbered plan) or `ask` (one model turn).
            patterns: glob patterns over tool names (`time.*`); None: every tool of the mode.
            max_steps: the run's step limit (at most META_AGENT_MAX_STEPS_CEILING); None: the settings' default.
            token_budget: the run's token limit; None: META_AGENT_TOKEN_BUDGET.
            emit: an async function that gets every event of the run.
            approver: asks the caller to approve a call the trust policy does not allow outright.
            sampling: the host's own model, where the caller can sample (`sampling` in META_AGENT_MODEL).
            questions: where the children's questions (elicitation) go to the caller.
            conversation_id: the conversation this run continues; None: a new one.
            run_id: the run's id, where the caller gave it one already (an MCP task's); None: a new one.
            owner: whose run it is, an opaque subject of at most 40 characters (meta_agent.front.auth.subjects): the
                run, the conversation it starts and the tools allowed in it are that subject's, and a conversation of
                another's is unknown to it. The local user's by default.
            call_key: the call that started it, as its caller's app knows it (front/apps): how a run view finds it.
            code: code mode (docs/code-mode.md): the model writes a program over the tools with run_code; None:
                META_AGENT_CODE_MODE decides.

        Returns:
            The run's result: its answer, stop reason, steps and usage, and the conversation it continues.

        Raises:
            ConfigError: a bad argument (max_steps over the ceiling, a token budget below 1), an unknown conversation
                or one whose stored record cannot be read.
            PatternError: a `tools` pattern that is malformed or matches no tool.
            ProviderError: no model is configured, or the provider failed and no model of the fallback chain was left
                (the `RunFailed` event before it carries what the run had done).
        """
        return await self.runs.run(
            task,
            mode=mode,
            patterns=patterns,
            max_steps=max_steps,
            token_budget=token_budget,
            emit=emit,
            approver=approver,
            sampling=sampling,
            questions=questions,
            conversation_id=conversation_id,
            run_id=run_id,
            owner=owner,
            call_key=call_key,
            code=code,
        )

    def _child_changed(self, child: ChildServer) -> None:
        self.toolbox.changed(child)
