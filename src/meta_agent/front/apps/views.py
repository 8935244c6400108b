"""What the apps and the console read and change, whoever asks through which door: the app-only MCP tools
(front/apps/tools.py) and the console's API (front/http/console.py) both call `AppViews` with the caller's subject
and the arguments they checked.

Every answer is the caller's own: a run, a question or a preference of another subject is unknown, as a made-up id
is. Reads are bounded (a page of events, at most `READERS` at once per process), so a view polling fast, or many
views, cost the runs little.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import anyio.abc
import structlog

from meta_agent.core.policy import TrustLevel
from meta_agent.core.result import Mode
from meta_agent.engine import Engine
from meta_agent.errors import MetaAgentError, summary
from meta_agent.front.apps.approver import ViewAnswers, ViewApprover
from meta_agent.records.run_feed import ANSWER_CHARS, shown
from meta_agent.shared.ids import random_ulid
from meta_agent.shared.text import one_line
from meta_agent.store.app_questions import AppQuestions, Settled
from meta_agent.store.preferences import Preferences
from meta_agent.store.run_index import RunState

log = structlog.get_logger(__name__)
T = TypeVar("T")
READERS = 8  # reads of the database for views at once, per process; more wait their turn
DESCRIPTION_CHARS = 600
PER_SUBJECT = 10  # runs started from views that one subject may have running at once, of META_AGENT_MAX_TASKS
RECENT_RUNS = 20  # how many of a caller's newest runs a view without its call's id looks through for its task
SETTLE_SECONDS = 10.0  # how long the tool selector waits for children still starting; then it shows them starting
FIND_TOOLS = "find_tools"  # the one internal tool the toolbox does not list: it joins a run that searches its tools
FIND_TOOLS_DESCRIPTION = (
    "Finds the tools a task needs among many: when it is on and a run has many tools, the model searches them instead"
    " of seeing every schema. Off: every tool's schema goes to the model."
)


class ViewError(MetaAgentError):
    """What a view asked cannot be done: one line, for the caller."""


def call_key(connection: str, request_id: object) -> str:
    """The key of the call a run was started by: the caller's connection (meta_agent.front.auth.subjects) and the
    JSON-RPC id of its `tools/call`, which is all a host's app knows of the run it shows (`hostContext.toolInfo.id`).
    A digest: an id may be any JSON a host chose, of any length."""
    text = f"{connection}\n{json.dumps(request_id, sort_keys=True, default=str)}"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:40]


@dataclass(frozen=True, kw_only=True)
class Caller:
    """Who asks: the subject that owns runs and preferences, and its connection (for the call keys)."""

    owner: str
    connection: str


class AppViews:
    def __init__(self, engine: Engine, background: anyio.abc.TaskGroup, *, max_runs: int) -> None:
        """`background`: where runs started from a view run (the server's lifespan's); at most `max_runs` of them at
        once (META_AGENT_MAX_TASKS)."""
        self.engine = engine
        self.questions = AppQuestions(engine.database)
        self.answers = ViewAnswers()
        self._background = background
        self._max_runs = max_runs
        self._started: dict[str, int] = {}  # runs started from views and running, by subject
        # the subject of each run started from a view here, until it ends: one whose row is not written yet is
        # "not there yet" to its subject, as a run whose call has not started it, not an unknown run
        self._starting: dict[str, str] = {}
        self._readers = anyio.CapacityLimiter(READERS)

    def approver(self, inner: Any, run_id: str, owner: str) -> ViewApprover:
        """The approver of a run a view shows: its questions go to the view, and to `inner` (the host's own
        question) where there is one; the first answer wins."""
        redact = self.engine.runs.redact
        return ViewApprover(inner, self.questions, self.answers, run_id=run_id, owner=owner, redact=redact)

    async def run(
        self, caller: Caller, *, run_id: str | None, request_id: object, task: str | None, after: int
    ) -> dict[str, Any]:
        """A run's events after `after`, its open questions and, once done, its result; the run named by `run_id`,
        else the newest of the caller's started by its call `request_id` (`run: None` while there is none yet), else
        (a host that does not tell the call's id) the newest of its running runs of `task`."""
        async with self._readers:
            state = await self._find(caller, run_id, request_id, task)
            if state is None:
                return {"run": None, "events": [], "cursor": after, "more": False, "pending": [], "result": None}
            rows, more = await self._read(self.engine.runs.events.page, state.run_id, max(after, 0))
            pending = await self._read(self.questions.pending, state.run_id) if state.status == "running" else []
        return {
            "run": {
                "run_id": state.run_id,
                "mode": state.mode,
                "task": shown(state.task, 4000)[0],
                "status": state.status,
                "started": state.started,
            },
            "events": [{"seq": seq, **json.loads(body)} for seq, body in rows],
            "cursor": rows[-1][0] if rows else max(after, 0),
            "more": more,
            "pending": [
                {"key": q.key, "name": shown(q.name, 200)[0], "arguments": q.arguments, "step": q.step} for q in pending
            ],
            "result": _result(state),
        }

    async def _find(self, caller: Caller, run_id: str | None, request_id: object, task: str | None) -> RunState | None:
        if run_id is not None:
            state = await self._read(self.engine.runs.index.read, run_id, owner=caller.owner)
            if state is None and self._starting.get(run_id) == caller.owner:
                return None
            if state is None:
                raise ViewError(f"unknown run {one_line(run_id, 60)!r}")
            return state
        if request_id is None and task is None:
            raise ViewError("give run_id, or request_id (the id of the tools/call whose run to show)")
        if request_id is None:  # a host that does not tell its app the call's id: the caller's newest running run of it
            recent = await self._read(self.engine.runs.index.recent, RECENT_RUNS, owner=caller.owner)
            return next((run for run in recent if run.status == "running" and run.task.startswith(task or "")), None)
        key = call_key(caller.connection, request_id)
        return await self._read(self.engine.runs.index.by_call, key, task, owner=caller.owner)

    async def answer(self, caller: Caller, *, run_id: str, key: str, allowed: bool) -> dict[str, Any]:
        """Answer the caller's open question `key` of its run `run_id`: the answer it has now (another may have won)."""
        answer = Settled(
            allowed=allowed, answer="allowed once (in the run view)" if allowed else "denied (in the run view)"
        )
        async with self._readers:
            settled = await self._read(self.questions.settle, run_id, key, caller.owner, answer)
        if settled is None:
            raise ViewError(f"no question {one_line(key, 60)!r} of run {one_line(run_id, 60)!r}")
        now, taken = settled
        self.answers.answered(run_id, key)
        return {"ok": taken, "allowed": now.allowed, "answer": now.answer}

    async def toolbox(self, caller: Caller) -> dict[str, Any]:
        """Every tool the toolbox lists, internal ones first, the others under their server, as the caller chose
        them; the caller's mode. Children still starting are waited for a while (SETTLE_SECONDS)."""
        chosen = await self._chosen(caller)
        with anyio.move_on_after(SETTLE_SECONDS):  # a selector opened as the server starts: its children's tools
            await self.engine.pool.wait_settled()
        described = self.engine.toolbox.describe()
        statuses = {server["name"]: server for server in described["servers"]}
        internal: list[dict[str, Any]] = []
        servers: dict[str, dict[str, Any]] = {name: _server_json(status) for name, status in statuses.items()}
        for tool in described["tools"]:
            shown_tool = _tool_view(tool, statuses.get(tool["server"]), chosen)
            if tool["server"] is None:
                internal.append(shown_tool)
            else:
                servers.setdefault(tool["server"], _server_json(None, tool["server"]))["tools"].append(shown_tool)
        internal.append(self._finder(chosen))
        return {
            "mode": chosen.mode or "agent",
            "internal": internal,
            "servers": list(servers.values()),
            "problems": [shown(problem, 1000)[0] for problem in described["problems"]],
        }

    def _finder(self, chosen: Preferences) -> dict[str, Any]:
        off = self.engine.settings.tool_search == "off"
        return {
            "name": FIND_TOOLS,
            "title": "Find tools",
            "description": FIND_TOOLS_DESCRIPTION,
            "read_only": True,
            "available": not off,
            "why_unavailable": "META_AGENT_TOOL_SEARCH is off" if off else None,
            "enabled": FIND_TOOLS not in chosen.off,
            "trust": "always",
            "trust_default": "always",
            "locked": True,
            "why_locked": "it only reads the run's own tool list, so it is always allowed",
        }

    async def set_tool(
        self, caller: Caller, *, name: str, enabled: bool | None, trust: TrustLevel | None
    ) -> dict[str, Any]:
        """Switch the caller's tool `name` on or off, set its trust level: the tool as the caller has it now."""
        tool = next((tool for tool in _tools_of(await self.toolbox(caller)) if tool["name"] == name), None)
        if tool is None:
            raise ViewError(f"name: no tool {one_line(name, 100)!r} in the toolbox")
        if trust is not None and tool["locked"] and trust != tool["trust_default"]:
            why = "the operator set it to never" if tool["trust_default"] == "never" else "its level is fixed"
            raise ViewError(f"trust: {name} stays {tool['trust_default']}: {why}")
        await self._write(self.engine.runs.preferences.set_tool, caller.owner, name, enabled=enabled, trust=trust)
        after = await self.toolbox(caller)
        return next(
            t for t in after["internal"] + [t for s in after["servers"] for t in s["tools"]] if t["name"] == name
        )

    async def set_mode(self, caller: Caller, mode: Mode) -> dict[str, Any]:
        await self._write(self.engine.runs.preferences.set_mode, caller.owner, mode)
        return {"mode": mode}

    async def start(self, caller: Caller, *, task: str, mode: Mode) -> dict[str, Any]:
        """Start a run of `task` in `mode` for the caller, in the background; its questions go to its view."""
        running = sum(self._started.values())
        if running >= self._max_runs:
            raise ViewError(f"{self._max_runs} runs started from views are running already (META_AGENT_MAX_TASKS)")
        mine = self._started.get(caller.owner, 0)
        if mine >= PER_SUBJECT:
            raise ViewError(f"{PER_SUBJECT} of your runs started from views are running already; wait for one to end")
        run_id = random_ulid()
        self._started[caller.owner] = mine + 1
        self._starting[run_id] = caller.owner
        self._background.start_soon(self._run_started, caller.owner, task, mode, run_id)
        return {"run_id": run_id}

    async def _run_started(self, owner: str, task: str, mode: Mode, run_id: str) -> None:
        try:
            await self.engine.run(
                task, mode=mode, approver=self.approver(None, run_id, owner), owner=owner, run_id=run_id
            )
        except MetaAgentError as exc:  # the run's view shows it: its index row says why it ended
            log.info("view_run_failed", run_id=run_id, error=one_line(str(exc), 300))
        except Exception as exc:  # a bug of ours: the traceback for the log
            log.exception("view_run_crashed", run_id=run_id, error=summary(exc))
        finally:
            self._starting.pop(run_id, None)
            if (left := self._started.pop(owner, 1) - 1) > 0:
                self._started[owner] = left

    async def runs(self, caller: Caller, limit: int) -> dict[str, Any]:
        """The caller's newest `limit` runs, newest first."""
        async with self._readers:
            states = await self._read(self.engine.runs.index.recent, max(1, min(limit, 200)), owner=caller.owner)
        return {
            "runs": [
                {
                    "run_id": state.run_id,
                    "task": shown(state.task, 300)[0],
                    "mode": state.mode,
                    "status": state.status,
                    "started": state.started,
                }
                for state in states
            ]
        }

    async def _chosen(self, caller: Caller) -> Preferences:
        async with self._readers:
            return await self._read(self.engine.runs.preferences.of, caller.owner)

    async def _read(self, read: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        try:
            return await read(*args, **kwargs)
        except self.engine.database.errors as exc:
            raise ViewError(f"cannot read {self.engine.database.label}: {one_line(str(exc), 300)}") from None

    async def _write(self, write: Callable[..., Awaitable[None]], *args: Any, **kwargs: Any) -> None:
        try:
            await write(*args, **kwargs)
        except self.engine.database.errors as exc:
            raise ViewError(f"cannot write {self.engine.database.label}: {one_line(str(exc), 300)}") from None


def _tools_of(toolbox: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [*toolbox["internal"], *(tool for server in toolbox["servers"] for tool in server["tools"])]


def _result(state: RunState) -> dict[str, Any] | None:
    """A done run's result as a view shows it: its answer (cut, safe), stop reason, usage and conversation."""
    if state.status != "done":
        return None
    if state.result is None:
        return {"answer": "", "stop_reason": "error", "error": shown(state.error or "", 4000)[0], "usage": None}
    result = state.result
    return {
        "answer": shown(str(result.get("answer", "")), ANSWER_CHARS)[0],
        "stop_reason": result.get("stop_reason"),
        "usage": result.get("usage"),
        "conversation_id": result.get("conversation_id"),
        "error": None,
    }


def _server_json(status: Mapping[str, Any] | None, name: str = "") -> dict[str, Any]:
    if status is None:  # the webhooks: no process, always there
        return {"name": name, "status": "ready", "reason": None, "tools": []}
    state = status["status"]
    reason = None if state == "ready" else shown(status.get("error") or state, 1000)[0]
    return {"name": status["name"], "status": state, "reason": reason, "tools": []}


def _tool_view(tool: Mapping[str, Any], server: Mapping[str, Any] | None, chosen: Preferences) -> dict[str, Any]:
    operator: TrustLevel = tool["trust"]
    level = chosen.trust.get(tool["name"], operator) if operator != "never" else "never"
    down = server is not None and server["status"] != "ready"
    why = tool["withheld"] or (f"{server['name']} is {server['status']}" if down and server is not None else None)
    return {
        "name": tool["name"],
        "title": tool["title"],
        "description": shown(tool["description"] or "", DESCRIPTION_CHARS)[0],
        "read_only": tool["annotations"].get("readOnlyHint") is True,
        "available": why is None,
        "why_unavailable": None if why is None else shown(why, 1000)[0],
        "enabled": tool["name"] not in chosen.off,
        "trust": level,
        "trust_default": operator,
        "locked": operator == "never",
        "why_locked": "the operator set it to never" if operator == "never" else None,
    }
