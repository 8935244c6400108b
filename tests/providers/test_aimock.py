"""meta-agent against a third-party LLM emulator, aimock (npm @copilotkit/aimock): its Responses API with reasoning
items, and a fallback chain whose first model fails mid-run, as a user runs it (`meta-agent run` in its own
process, the real openai SDK, a real child server)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from conftest import FAULT_SERVER, TESTS, free_port

AIMOCK = TESTS / "node_modules" / "@copilotkit" / "aimock" / "dist" / "cli.js"
Start = Callable[[list[dict[str, Any]]], str]  # aimock's fixtures -> its URL
ECHO_TURNS = [
    {
        "match": {"model": "gpt-5.5", "hasToolResult": False},
        "response": {
            "reasoning": "The echo tool will say it back.",
            "toolCalls": [{"name": "f__echo", "arguments": {"text": "hello"}}],
        },
    },
]


@pytest.fixture
def aimock(tmp_path: Path) -> Iterator[Start]:
    """Starts aimock on a free port serving the fixtures given; its URL. Stopped after the test."""
    with ExitStack() as stack:

        def start(turns: list[dict[str, Any]]) -> str:
            fixtures = tmp_path / "fixtures.json"
            fixtures.write_text(json.dumps({"fixtures": turns}))
            port = free_port()
            command = ["node", str(AIMOCK), "-p", str(port), "-f", str(fixtures), "--log-level", "warn"]
            process = stack.enter_context(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
            stack.callback(process.terminate)
            _wait_for_port(port, process)
            return f"http://127.0.0.1:{port}"

        yield start


def _wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)  # polling a port that is not open yet: no event to wait on
    raise AssertionError(f"aimock did not listen on {port} within {timeout} s")


def run(tmp_path: Path, url: str, **environ: str) -> tuple[dict[str, Any], str]:
    """`meta-agent run --json` with the fault server as child `f`, against aimock at `url`: its result and progress."""
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"f": {"command": sys.executable, "args": [str(FAULT_SERVER)]}}}))
    env = {
        **os.environ,
        "OPENAI_BASE_URL": f"{url}/v1",
        "OPENAI_API_KEY": "mock",
        "META_AGENT_TRACE_DIR": str(tmp_path / "traces"),
        "META_AGENT_CONVERSATIONS_DB": str(tmp_path / "c.db"),
        **environ,
    }
    command = [sys.executable, "-m", "meta_agent", "run", "echo hello", "--config", str(config), "--json"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


def test_the_responses_api_of_aimock_with_reasoning_items(tmp_path: Path, aimock: Start) -> None:
    answer = {
        "match": {"model": "gpt-5.5", "hasToolResult": True},
        "response": {"reasoning": "Done.", "content": "It said hello."},
    }
    out, progress = run(
        tmp_path,
        aimock([*ECHO_TURNS, answer]),
        META_AGENT_MODEL="openai:gpt-5.5",
        META_AGENT_OPENAI_API="responses",
    )
    assert out["answer"] == "It said hello." and out["stop_reason"] == "final"
    assert out["steps"][0]["tool_calls"][0] == {
        "name": "f.echo",
        "arguments": {"text": "hello"},
        "ok": True,
        "duration_ms": out["steps"][0]["tool_calls"][0]["duration_ms"],
    }
    assert "step 1 · thinking: The echo tool will say it back." in progress
    assert "step 2 · thinking: Done." in progress


def test_a_chain_whose_first_model_fails_mid_run_goes_on_with_the_next(tmp_path: Path, aimock: Start) -> None:
    failing = {
        "match": {"model": "gpt-5.5", "hasToolResult": True},
        "response": {"error": {"message": "The server is overloaded", "type": "server_error"}, "status": 503},
    }
    local = {"match": {"model": "qwen3"}, "response": {"content": "The echo said hello (from qwen3)."}}
    url = aimock([*ECHO_TURNS, failing, local])
    out, progress = run(
        tmp_path,
        url,
        META_AGENT_MODEL="openai:gpt-5.5,ollama:qwen3",
        META_AGENT_OPENAI_API="responses",
        OLLAMA_HOST=url,
    )
    assert out["answer"] == "The echo said hello (from qwen3)."
    assert out["usage"]["models"] == {"openai:gpt-5.5": 1, "ollama:qwen3": 1}
    assert "step 2 · openai:gpt-5.5 failed (HTTP 503); going on with ollama:qwen3" in progress
