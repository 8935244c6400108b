"""Log lines to hosts: the SDK's real Client in memory against build_server, in both eras, with a real child and the
real openai SDK against the fake model endpoint. A host that asks gets meta-agent's own lines at or above its level
as `notifications/message`, a run's lines tagged with its run id, never a secret; one that does not gets none."""

from __future__ import annotations

import io
import json
import logging
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio
import mcp.types as t
import pytest
import structlog
from conftest import fault_entry, openai_env
from fake_llm import FakeLLM, openai_reply
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning

from meta_agent.config.settings import Settings
from meta_agent.front.server import build_server
from meta_agent.records.logs import configure_logging, forward_to_taps
from meta_agent.records.traces import REDACTED

pytestmark = pytest.mark.anyio
SECRET = "child-env-secret-9876"


class Heard:
    """A logging_callback that keeps every line and lets a test wait for one."""

    def __init__(self) -> None:
        self.lines: list[t.LoggingMessageNotificationParams] = []
        self._changed = anyio.Event()

    async def __call__(self, params: t.LoggingMessageNotificationParams) -> None:
        self.lines.append(params)
        self._changed.set()
        self._changed = anyio.Event()

    def events(self, run_id: str | None = None) -> list[str]:
        return [line.data["event"] for line in self.lines if run_id is None or line.data.get("run_id") == run_id]

    async def wait_for(self, event: str) -> t.LoggingMessageNotificationParams:
        with anyio.fail_after(10):
            while not (found := [line for line in self.lines if line.data["event"] == event]):
                await self._changed.wait()
        return found[0]


@pytest.fixture(autouse=True)
def tapped_structlog() -> Iterator[None]:
    """structlog as configure_logging sets it up for the taps, with nothing printed and no logger cached (a cached
    logger would keep this chain for the tests that follow)."""

    def drop(_logger: Any, _name: str, _event: Any) -> Any:
        raise structlog.DropEvent

    old = structlog.get_config()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            forward_to_taps,
            drop,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
    )
    try:
        yield
    finally:
        structlog.configure(**old)


@asynccontextmanager
async def serving(llm: FakeLLM, heard: Heard, **client: Any) -> AsyncIterator[Client]:
    """A server with the fault child (its env holding SECRET), and a client that listens for log lines."""
    servers = {"f": fault_entry(env={"SOME_SETTING": SECRET}, trust={"write_stderr": "always"})}
    server = build_server(Settings(model="openai:fake-model"), servers, openai_env(llm))
    async with Client(server, logging_callback=heard, **client) as connected:
        assert server.engine is not None
        await server.engine.pool.wait_settled()
        yield connected


async def leaky_run(client: Client, llm: FakeLLM) -> str:
    """An agent run whose tool makes the child print SECRET on its stderr, which meta-agent logs; its run id."""
    llm.reply(openai_reply(None, ("c1", "f__write_stderr", {"text": f"leaking {SECRET}"})))
    llm.reply(openai_reply("done"))
    result = await client.call_tool("agent", {"task": "leak it"})
    assert not result.is_error and result.structured_content is not None
    run_id: str = result.structured_content["run_id"]
    return run_id


async def set_level(client: Client, level: t.LoggingLevel) -> None:
    with warnings.catch_warnings():  # logging/setLevel is deprecated in 2026-07-28; this session is 2025-11-25
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        await client.set_logging_level(level)


async def test_a_session_that_sets_a_level_gets_our_lines_tagged_and_redacted(llm: FakeLLM) -> None:
    heard = Heard()
    async with serving(llm, heard, mode="legacy") as client:
        assert client.server_capabilities is not None and client.server_capabilities.logging is not None
        await set_level(client, "info")
        run_id = await leaky_run(client, llm)
        # The run's lines precede its result, each tagged with its run id.
        assert heard.events(run_id)[0] == "run_started" and heard.events(run_id)[-1] == "run_finished"
        started = next(line for line in heard.lines if line.data["event"] == "run_started")
        assert (started.level, started.logger, started.data["mode"]) == ("info", "meta_agent.engine.runs", "agent")
        # The child's stderr is logged outside any request: it goes to the session, redacted.
        stderr = await heard.wait_for("child_stderr")
        assert stderr.data["line"] == f"leaking {REDACTED}" and stderr.data["server"] == "f"
    assert SECRET not in json.dumps([line.model_dump() for line in heard.lines])


async def test_nothing_below_the_level_and_nothing_unasked(llm: FakeLLM) -> None:
    heard = Heard()
    async with serving(llm, heard, mode="legacy") as client:
        await quiet_run(client, llm)  # before any logging/setLevel: nothing is sent
        await set_level(client, "error")
        await quiet_run(client, llm)  # its lines are info: below the level
        await set_level(client, "info")
        run_id = await quiet_run(client, llm)
        # The lines of that last run are the first this session hears.
        assert heard.lines and {line.data.get("run_id") for line in heard.lines} == {run_id}


async def quiet_run(client: Client, llm: FakeLLM) -> str:
    llm.reply(openai_reply("done"))
    result = await client.call_tool("agent", {"task": "say done"})
    assert not result.is_error and result.structured_content is not None
    run_id: str = result.structured_content["run_id"]
    return run_id


async def test_a_2026_request_gets_its_run_lines_when_its_meta_asks(llm: FakeLLM) -> None:
    heard = Heard()
    async with serving(llm, heard, log_level="info") as client:
        assert client.protocol_version == "2026-07-28"
        run_id = await leaky_run(client, llm)
        assert heard.events(run_id)[0] == "run_started" and heard.events(run_id)[-1] == "run_finished"
        assert all(line.level != "debug" for line in heard.lines)
    assert SECRET not in json.dumps([line.model_dump() for line in heard.lines])
    unasked = Heard()
    async with serving(llm, unasked) as client:
        await leaky_run(client, llm)
    assert unasked.lines == []


@contextmanager
def restored_logging() -> Iterator[None]:
    old, root = structlog.get_config(), logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        structlog.configure(**old)
        root.handlers[:], root.level = handlers, level


def test_configure_logging_hands_our_lines_to_the_taps() -> None:
    with restored_logging():
        configure_logging("warning", stream=io.StringIO())  # the taps get every level, whatever stderr's
        assert forward_to_taps in structlog.get_config()["processors"]


async def test_a_line_outside_any_request_about_one_caller_goes_to_no_session(llm: FakeLLM) -> None:
    """A line logged outside any request is the server's (a child's stderr, a restart) and goes to every session that
    asked; one that names a run, task or conversation (another replica's run resumed here, a task's background work)
    or a caller's refused token is that caller's alone, and goes to none: every session would hear it."""
    heard = Heard()
    async with serving(llm, heard, mode="legacy") as client:
        await set_level(client, "info")
        structlog.get_logger("meta_agent.durable.runs").info("run_resumed", run_id="01M8FJX02CV2A6AC6N5PFF1J3F")
        structlog.get_logger("meta_agent.front.tasks.board").info("task_question_declined", task_id="01M8FJX0")
        structlog.get_logger("meta_agent.front.auth.resource_server").info("token_refused", reason="expired")
        structlog.get_logger("meta_agent.children.supervisor").info("child_restarting", server="f")
        await heard.wait_for("child_restarting")
    assert heard.events() == ["child_restarting"]
