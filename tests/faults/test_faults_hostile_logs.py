"""The fault suite's hostile log group (category hostile_input): what a model, a child or a library can make us log,
through the real handler configure_logging sets up (tests/faults/test_faults.py describes the suite; the harness is
tests/fixtures/fault_harness.py).

hostile_logs: a library error repeated in a burst, a child's stderr spammed, a library's multi-line message with its
traceback, a bad format string, and a model asking a webhook to override its URL's own query while another webhook
fails with secrets in its path, query and headers. Each is checked on the lines written: every one a JSON object,
a repeated kind written about once a second with every line written or counted, no webhook secret anywhere, and
nothing sent for the override.
"""

from __future__ import annotations

import io
import json
import logging
import math
import time
from typing import Any

import pytest
import structlog
from captured_logs import logged_to
from conftest import free_port
from fault_harness import group, injecting, log_to_a_list  # noqa: F401  (this module's fixtures)
from fault_tally import TALLY
from webhook_receiver import Receiver

from meta_agent.children.webhooks import Webhooks
from meta_agent.config.servers import parse_servers
from meta_agent.errors import ChildError

pytestmark = pytest.mark.anyio

GROUPS = {"hostile_logs"}
TALLY.expected_groups |= GROUPS
BURST = 1000
SECRETS = ("fp4th-7c1e2b9a", "fqu3ry-0d5f8e3c", "fh3ader-9a8b7c6d")


def lines_of(stream: io.StringIO) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert all(isinstance(line, dict) for line in lines)
    return lines


def counted(lines: list[dict[str, Any]], event: str) -> tuple[int, int]:
    """Lines of `event` written, and how many they stand for with those held back."""
    mine = [line for line in lines if line["event"] == event]
    return len(mine), sum(1 + line.get("repeated", 0) for line in mine)


async def test_hostile_logs() -> None:
    async with group("hostile_logs", "hostile_input"):
        await floods()
        await one_line_each()
        with Receiver() as hooks:
            await webhook_secrets(hooks)


async def floods() -> None:
    async with injecting("hostile_input", 2) as faults:
        stream = io.StringIO()
        started = time.monotonic()
        with logged_to(stream, "debug"):
            for n in range(BURST):
                logging.getLogger("asyncio").error("accept failed", exc_info=OSError(24, f"Too many open files {n}"))
                structlog.get_logger("meta_agent.children.connect").info("child_stderr", server="noisy", line=f"{n}")
        bound = math.ceil(time.monotonic() - started) + 2
        for event in ("accept failed", "child_stderr"):
            written, stands_for = counted(lines_of(stream), event)
            assert written <= bound and stands_for == BURST, (event, written, stands_for)
            faults.handled()


async def one_line_each() -> None:
    async with injecting("hostile_input", 2) as faults:
        stream = io.StringIO()
        with logged_to(stream, "debug"):
            try:
                raise ValueError("first\nsecond\r\nthird")
            except ValueError:
                logging.getLogger("dbos").exception("line one\nline two")
            logging.getLogger("sqlalchemy.engine").error("%s %s", "too few")
        lines = lines_of(stream)
        assert [line["event"] for line in lines] == ["line one\nline two", "log_line_unwritable"]
        assert "ValueError: first" in lines[0]["exception"]
        faults.handled(2)


async def webhook_secrets(hooks: Receiver) -> None:
    path, query, header = SECRETS
    entries = {
        "post": {"url": f"{hooks.url}/hook?channel=general&token=SECRET", "method": "GET"},
        "failing": {"url": f"{hooks.url}/h/{path}?k={query}", "method": "GET", "headers": {"X-Key": header}},
        "refused": {"url": f"http://127.0.0.1:{free_port()}/h/{path}?k={query}", "headers": {"X-Key": header}},
    }
    webhooks = Webhooks(parse_servers(json.dumps({"mcpServers": {}, "webhooks": entries}), "s.json", {}).webhooks)
    async with injecting("hostile_input", 3) as faults:
        stream = io.StringIO()
        told: list[str] = []
        with logged_to(stream, "debug"):
            with pytest.raises(ChildError) as override:
                await webhooks.call("post", {"token": "ATTACKER", "channel": "admins"})
            assert hooks.received == [] and "\n" not in str(override.value)
            faults.handled()
            hooks.answer(f"no such hook {path}", status=404)
            told.append(str((await webhooks.call("failing", {"q": "x"})).content))
            with pytest.raises(ChildError) as refused:
                await webhooks.call("refused", {})
            told.append(str(refused.value))
            await webhooks.aclose()
        written = stream.getvalue()
        assert "HTTP Request: GET" in written
        for text in (written, *told):
            assert not [secret for secret in SECRETS if secret in text], text
        faults.handled(2)
