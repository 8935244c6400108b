"""What the model cannot do to a webhook, and what a webhook's secrets never reach: a GET's arguments are added to the
configured URL's query and never replace a parameter of it; the URL's path and query and the header values stay out of
every stderr line of a real `meta-agent serve` / `meta-agent run` at debug level (the HTTP library's own request
lines included) and out of the errors the model reads. Against a real receiver on 127.0.0.1
(fixtures/webhook_receiver.py) and the real openai SDK against the fake model."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import free_port, http_serving, openai_env
from fake_llm import FakeLLM, openai_reply
from mcp import Client
from webhook_receiver import Receiver

from meta_agent.children.webhooks import Webhooks
from meta_agent.config.servers import parse_servers
from meta_agent.config.settings import Settings
from meta_agent.engine import Engine
from meta_agent.errors import ChildError

pytestmark = pytest.mark.anyio
PATH_SECRET = "p4th-s3cret-71c2"
QUERY_SECRET = "qu3ry-s3cret-88d1"
HEADER_SECRET = "h3ader-s3cret-5a0e"
SECRETS = (PATH_SECRET, QUERY_SECRET, HEADER_SECRET)
# What `meta-agent run` tells people on stderr beside the log lines: its progress lines.
PROGRESS = re.compile(r"^(start|step \d+|waiting|done|failed) · ")


@pytest.fixture
def hooks() -> Iterator[Receiver]:
    with Receiver() as receiver:
        yield receiver


def webhooks(entries: dict[str, Any]) -> Webhooks:
    return Webhooks(parse_servers(json.dumps({"mcpServers": {}, "webhooks": entries}), "servers.json", {}).webhooks)


# -- a GET's arguments are added, never replace ------------------------------------------------------------------


async def test_a_get_argument_named_as_a_parameter_of_the_url_is_a_one_line_error_and_nothing_is_sent(
    hooks: Receiver,
) -> None:
    hook = webhooks({"post": {"url": f"{hooks.url}/hook?channel=general&token=SECRET", "method": "GET"}})
    try:
        with pytest.raises(ChildError) as caught:
            await hook.call("post", {"token": "ATTACKER", "channel": "admins"})
        assert str(caught.value) == (
            "webhooks: post: the arguments 'channel', 'token' are set by the webhook's own URL and cannot be given; "
            "nothing was sent"
        )
        with pytest.raises(ChildError, match=r"the argument 'token' is set by the webhook's own URL"):
            await hook.call("post", {"text": "hi", "token": "ATTACKER"})
        assert hooks.received == []
        hooks.answer("posted", content_type="text/plain")
        result = await hook.call("post", {"text": "hi & bye"})
    finally:
        await hook.aclose()
    assert not result.is_error
    [seen] = hooks.received
    assert seen.query == [("channel", "general"), ("token", "SECRET"), ("text", "hi & bye")]


# -- secrets in no log line and no error ------------------------------------------------------------------------


def secret_hooks(receiver: Receiver) -> dict[str, Any]:
    """One webhook the receiver fails (HTTP 500), one whose port refuses: each with a secret in its URL's path and
    query and in a header value."""
    secret_url = f"/hook/{PATH_SECRET}?token={QUERY_SECRET}"
    return {
        "failing": {
            "url": receiver.url + secret_url,
            "method": "GET",
            "headers": {"X-Key": HEADER_SECRET},
            "trust": "always",
        },
        "refused": {
            "url": f"http://127.0.0.1:{free_port()}{secret_url}",
            "headers": {"Authorization": f"Token {HEADER_SECRET}"},
            "trust": "always",
        },
    }


def script_both_calls(llm: FakeLLM) -> None:
    llm.reply(openai_reply(None, ("c1", "webhooks__failing", {"text": "hi"}), ("c2", "webhooks__refused", {})))
    llm.reply(openai_reply("Both failed."))


def assert_no_secret(text: str) -> None:
    leaked = [secret for secret in SECRETS if secret in text]
    assert not leaked, f"{leaked} in: {[line for line in text.splitlines() if any(s in line for s in leaked)]}"


def assert_the_model_was_told_without_secrets(llm: FakeLLM, refused_port: int) -> None:
    told = [m["content"] for m in llm.requests[1].body["messages"] if m["role"] == "tool"]
    assert_no_secret(json.dumps(told))
    assert any("the webhook answered HTTP 500" in text for text in told), told
    assert any(f"refused: cannot connect to 127.0.0.1:{refused_port}: " in text for text in told), told


def port_of(entry: dict[str, Any]) -> int:
    return int(entry["url"].split(":")[2].split("/")[0])


async def test_no_secret_of_a_webhook_in_any_line_of_meta_agent_serve_at_debug(
    hooks: Receiver, llm: FakeLLM, tmp_path: Path
) -> None:
    entries = secret_hooks(hooks)
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {}, "webhooks": entries}))
    hooks.answer(f"boom at {PATH_SECRET}?token={QUERY_SECRET}", status=500)  # a receiver that echoes the URL too
    script_both_calls(llm)
    environ = openai_env(llm, model="openai:fake-model", base=os.environ, META_AGENT_LOG_LEVEL="debug")
    with http_serving(config, environ) as (url, log):
        async with Client(f"{url}/mcp") as client:
            result = await client.call_tool("agent", {"task": "call both"})
        assert not result.is_error, result.content
        log.wait_for("HTTP Request: GET")  # the library's own request line, written: its URL redacted
    assert hooks.received[0].headers["x-key"] == HEADER_SECRET  # the secrets were sent where they belong
    assert_no_secret("".join(log.lines))
    for line in log.lines:
        assert line.startswith("meta-agent: ") or isinstance(json.loads(line), dict), line
    assert_the_model_was_told_without_secrets(llm, port_of(entries["refused"]))


def test_no_secret_of_a_webhook_in_any_line_of_meta_agent_run_at_debug(
    hooks: Receiver, llm: FakeLLM, tmp_path: Path
) -> None:
    entries = secret_hooks(hooks)
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {}, "webhooks": entries}))
    hooks.answer("boom", status=500)
    script_both_calls(llm)
    environ = openai_env(llm, model="openai:fake-model", base=os.environ, META_AGENT_LOG_LEVEL="debug")
    done = subprocess.run(
        [sys.executable, "-m", "meta_agent", "run", "call both", "--config", str(config)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Both failed.\n"
    assert_no_secret(done.stderr)
    lines = done.stderr.splitlines()
    assert any("HTTP Request: GET" in line for line in lines), lines
    for line in lines:
        assert PROGRESS.match(line) or line.startswith("meta-agent: ") or isinstance(json.loads(line), dict), line
    assert_the_model_was_told_without_secrets(llm, port_of(entries["refused"]))


async def test_an_answer_that_echoes_the_url_reaches_neither_the_model_nor_the_trace_with_its_secrets(
    hooks: Receiver, llm: FakeLLM, tmp_path: Path
) -> None:
    """A 2xx answer quoting the request (as an echo endpoint, or an error page served with 200, does): the model reads
    it with the secrets `[redacted]`, and the run's trace holds none of them either."""
    entries = secret_hooks(hooks)
    hooks.answer(
        f"you called GET /hook/{PATH_SECRET}?token={QUERY_SECRET} with {HEADER_SECRET}", content_type="text/plain"
    )
    servers = parse_servers(json.dumps({"mcpServers": {}, "webhooks": entries}), "servers.json", {})
    llm.reply(openai_reply(None, ("c1", "webhooks__failing", {"text": "hi"})))
    llm.reply(openai_reply("Echoed."))
    settings = Settings(model="openai:fake-model", trace_dir=tmp_path)
    async with Engine(settings, servers, openai_env(llm)) as engine:
        result = await engine.run("call it", mode="agent")
    told = [m["content"] for m in llm.requests[1].body["messages"] if m["role"] == "tool"]
    assert_no_secret(json.dumps(told))
    assert told[0] == "you called GET [redacted]?[redacted] with [redacted]", told
    assert_no_secret((tmp_path / f"{result.run_id}.jsonl").read_text())
