"""A run exported to Arize Phoenix, read back through Phoenix's REST API as Phoenix shows it: an agent span with
model and tool children, and the model calls' token counts.

arize-phoenix is large (hundreds of MB) and in no extra of ours: scripts/test installs it into .venv-phoenix
(scripts/install-phoenix), where the test finds its `phoenix` command, else on PATH. Without it the test is skipped,
and fails under CI=true, where it must run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from conftest import TIME_COMMAND, free_port, openai_env, without_otel
from fake_llm import FakeLLM, openai_reply

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the otel extra is not installed")
INSTALLED = Path(__file__).parents[2] / ".venv-phoenix" / "bin" / "phoenix"  # by scripts/install-phoenix
PHOENIX = str(INSTALLED) if INSTALLED.exists() else shutil.which("phoenix")
MISSING = "arize-phoenix is not installed (scripts/install-phoenix; no `phoenix` command in .venv-phoenix or on PATH)"
pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(PHOENIX is None and os.environ.get("CI") != "true", reason=MISSING),
]

START_BOUND = 90.0  # seconds for Phoenix to start (it migrates its database first)
PROJECT = "meta-agent-test"


@pytest.fixture
def phoenix(tmp_path: Path) -> Iterator[str]:
    """Phoenix serving on 127.0.0.1 with a database in `tmp_path`; its URL."""
    assert PHOENIX is not None, f"{MISSING}: required under CI=true"
    port = free_port()
    environ = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(tmp_path / "phoenix"),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(free_port()),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    log = (tmp_path / "phoenix.log").open("w")
    process = subprocess.Popen([str(PHOENIX), "serve"], env=environ, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_BOUND
        while not _healthy(url):
            assert process.poll() is None, (tmp_path / "phoenix.log").read_text()[-2000:]
            assert time.monotonic() < deadline, f"Phoenix did not start within {START_BOUND:g} s"
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def _healthy(url: str) -> bool:
    try:
        return httpx2.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx2.TransportError:
        return False


def _spans(url: str, expected: int) -> list[dict[str, Any]]:
    """The project's spans once `expected` of them are there (Phoenix writes what it receives in batches)."""
    deadline = time.monotonic() + 30
    while True:
        answer = httpx2.get(f"{url}/v1/projects/{PROJECT}/spans", params={"limit": 100}, timeout=10)
        spans = answer.json().get("data", []) if answer.status_code == 200 else []
        if len(spans) >= expected or time.monotonic() > deadline:
            return spans
        time.sleep(0.2)


def test_phoenix_shows_the_run(phoenix: str, llm: FakeLLM, tmp_path: Path) -> None:
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"time": TIME_COMMAND}}))
    llm.reply(openai_reply(None, ("c1", "time__get_current_time", {"timezone": "Asia/Tokyo"})))
    llm.reply(openai_reply("It is evening in Tokyo."))
    clean = without_otel()
    environ = openai_env(
        llm,
        model="openai:fake-model",
        base=clean,
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"{phoenix}/v1/traces",  # Phoenix takes traces, not metrics
        OTEL_RESOURCE_ATTRIBUTES=f"openinference.project.name={PROJECT}",
    )
    result = subprocess.run(
        [sys.executable, "-m", "meta_agent", "run", "What time is it in Tokyo?", "--config", str(config)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr

    spans = _spans(phoenix, expected=4)
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        by_kind.setdefault(span.get("span_kind", ""), []).append(span)
    [agent] = by_kind["AGENT"]
    models, tools = by_kind["LLM"], by_kind["TOOL"]
    assert len(models) == 2 and len(tools) >= 1
    agent_id = agent["context"]["span_id"]
    assert all(span["parent_id"] == agent_id for span in models)
    assert any(span["parent_id"] == agent_id for span in tools)
    trace_ids = {span["context"]["trace_id"] for span in [agent, *models, *tools]}
    assert len(trace_ids) == 1
    for model in models:
        tokens = model["attributes"]
        assert tokens.get("llm.token_count.prompt") == 12 and tokens.get("llm.token_count.completion") == 7, tokens
