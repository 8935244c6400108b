"""`meta-agent check`'s look at the model (providers/model_check.py): each model of META_AGENT_MODEL judged as `run`
judges it, and a server on this machine asked for its model list, bounded in time and size, whatever it does. In this
process against the fake endpoint on 127.0.0.1 and raw sockets; then the command itself, for its lines and exit
codes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from conftest import free_port
from fake_llm import FakeLLM

from meta_agent.providers import model_check
from meta_agent.providers.model_check import ModelVerdict, check_models, is_local

pytestmark = pytest.mark.quick

NO_OLLAMA = {"OLLAMA_HOST": "127.0.0.1:1"}  # where no Ollama answers: a run with no model set finds none


def verdicts(setting: str | None, **environ: str) -> list[tuple[str, str, str]]:
    models: list[ModelVerdict] = anyio.run(check_models, setting, environ)
    return [(model.model, model.state, model.detail) for model in models]


def test_no_model_set_says_what_a_run_needs_and_fails_nothing() -> None:
    ((model, state, detail),) = verdicts(None, **NO_OLLAMA)
    assert (model, state) == ("none", "host")
    assert detail.startswith("a run needs the host's own model (a host of `meta-agent serve` that offers MCP sampling")
    assert "without which `meta-agent run` cannot start: set META_AGENT_MODEL" in detail
    # and how to go without a key, as `run` says it too
    assert detail.endswith(
        "without a key, a model server on this machine: OPENAI_BASE_URL=http://127.0.0.1:8080/v1 with"
        " META_AGENT_MODEL=openai:NAME, or Ollama at OLLAMA_HOST"
    )


@pytest.mark.parametrize(
    ("setting", "environ", "state", "detail"),
    [
        ("foo:bar", {}, "failed", "unknown provider 'foo' (use openai:, anthropic:, ollama:, gemini: or sampling)"),
        ("openai:", {}, "failed", "name the model after the colon, e.g. openai:NAME"),
        ("openai:gpt-5.5", {}, "failed", "set OPENAI_API_KEY (or OPENAI_BASE_URL for a local server)"),
        ("anthropic:claude-sonnet-5-5", {}, "failed", "set ANTHROPIC_API_KEY"),
        (  # a remote endpoint is not called: the key is all a check can see
            "openai:gpt-5.5",
            {"OPENAI_API_KEY": "sk-x"},
            "ready",
            "OPENAI_API_KEY is set; api.openai.com is not called by check (not on this machine or its network)",
        ),
        (
            "gemini:gemini-2.5-flash",
            {"GEMINI_API_KEY": "k"},
            "ready",
            "GEMINI_API_KEY is set; generativelanguage.googleapis.com is not called by check (not on this machine",
        ),
        ("sampling", {}, "host", "the host's own model: only under `meta-agent serve`, where the host offers MCP"),
    ],
)
def test_a_setting_is_judged_as_a_run_judges_it(setting: str, environ: dict, state: str, detail: str) -> None:
    ((model, got_state, got_detail),) = verdicts(setting, **environ)
    assert (model, got_state) == (setting, state)
    assert got_detail.startswith(detail), got_detail


@pytest.fixture
def two_models() -> Iterator[FakeLLM]:
    with FakeLLM(models=("qwen3:latest", "llama3")) as llm:
        yield llm


def test_a_local_server_is_asked_for_its_models(two_models: FakeLLM) -> None:
    llm = two_models
    base = f"{llm.url}/v1"
    assert verdicts("openai:llama3", OPENAI_BASE_URL=base, OPENAI_API_KEY="sk-local") == [
        ("openai:llama3", "ready", f"{base}/models answers and lists llama3")
    ]
    assert llm.requests[-1].path == "/v1/models" and llm.requests[-1].headers["authorization"] == "Bearer sk-local"
    # a name the server does not list: llama-server serves its one model under any name, so it is said, not failed
    ((_, state, detail),) = verdicts("openai:other", OPENAI_BASE_URL=base)
    assert state == "ready" and detail.startswith(f"{base}/models lists qwen3:latest, llama3, not other: llama-server")
    # Ollama runs only what was pulled; `ollama:qwen3` is its `qwen3:latest`
    host = llm.url.removeprefix("http://")
    assert verdicts("ollama:qwen3", OLLAMA_HOST=host)[0][1] == "ready"
    assert verdicts("ollama:mistral", OLLAMA_HOST=host) == [
        ("ollama:mistral", "failed", f"{base}/models lists qwen3:latest, llama3, not mistral: `ollama pull mistral`")
    ]


def test_a_chain_is_judged_model_by_model(llm: FakeLLM) -> None:
    environ = {"OPENAI_BASE_URL": f"{llm.url}/v1", **NO_OLLAMA}
    judged = verdicts("openai:qwen3:latest,ollama:qwen3,anthropic:x", **environ)
    assert [(model, state) for model, state, _ in judged] == [
        ("openai:qwen3:latest", "ready"),
        ("ollama:qwen3", "failed"),
        ("anthropic:x", "failed"),
    ]


def test_a_local_server_that_is_not_there_or_misaddressed_fails() -> None:
    port = free_port()
    ((_, state, detail),) = verdicts("openai:m", OPENAI_BASE_URL=f"http://127.0.0.1:{port}/v1")
    assert (state, detail) == (
        "failed",
        f"nothing answers at http://127.0.0.1:{port}/v1/models: start the server, or point OPENAI_BASE_URL at it",
    )
    ((_, state, detail),) = verdicts("ollama:qwen3", OLLAMA_HOST=f"localhost:{port}")
    assert state == "failed" and detail.endswith("point OLLAMA_HOST at it")


def test_a_base_url_is_told_without_its_credentials() -> None:
    port = free_port()
    ((_, _, detail),) = verdicts("openai:m", OPENAI_BASE_URL=f"http://user:s3cret@127.0.0.1:{port}/v1?key=k2")
    assert detail.startswith(f"nothing answers at http://127.0.0.1:{port}/v1")
    assert "s3cret" not in detail and "k2" not in detail


def test_a_base_url_without_v1_is_told(llm: FakeLLM) -> None:
    ((_, state, detail),) = verdicts("openai:qwen3", OPENAI_BASE_URL=llm.url)
    assert (state, detail) == (
        "failed",
        f"{llm.url}/models answers HTTP 404: an OpenAI-compatible base URL usually ends in /v1",
    )


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://127.0.0.1:8080/v1", True),
        ("http://localhost:11434", True),
        ("http://[::1]:8080/v1", True),
        ("http://192.168.1.20:8080/v1", True),
        ("http://10.0.0.7/v1", True),
        ("https://api.openai.com/v1", False),
        ("http://8.8.8.8/v1", False),
        ("http://gpu-box.lan:8080/v1", False),  # a name is not looked up: a check makes no DNS query
    ],
)
def test_what_counts_as_local(url: str, local: bool) -> None:
    assert is_local(url) is local


@pytest.fixture
def silent_server() -> Iterator[tuple[str, threading.Event]]:
    """A local 'server' that takes connections and then, per the event, never answers or drips one byte a second:
    its base URL; closed after the test."""
    listener = socket.create_server(("127.0.0.1", 0))
    drip = threading.Event()
    stop = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            held.append(conn)
            if drip.is_set():
                try:
                    conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n")
                    while not stop.wait(0.5):
                        conn.sendall(b" ")
                except OSError:  # the look gave up and closed the connection
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1", drip
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    listener.close()


@pytest.mark.parametrize("drips", [False, True], ids=["silent", "drip"])
def test_a_server_that_never_finishes_answering_costs_the_bound(
    silent_server: tuple[str, threading.Event], drips: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole look is bounded, not each read: a byte every half second would keep a per-read timeout waiting for
    a minute. The bound is made short here; what is tested is that it ends the look."""
    monkeypatch.setattr(model_check, "PROBE_TIMEOUT", 1.0)
    base, drip = silent_server
    if drips:
        drip.set()
    started = time.monotonic()
    ((_, state, detail),) = verdicts("openai:m", OPENAI_BASE_URL=base)
    assert (state, detail) == ("failed", f"{base}/models did not answer within 1 s")
    assert time.monotonic() - started < 30  # the bound ended it: the drip alone would take 50 s


def test_a_huge_model_list_is_read_only_so_far() -> None:
    with FakeLLM(models=tuple(f"model-{n}" for n in range(100_000))) as llm:  # a list of about 4 MB
        ((_, state, detail),) = verdicts("openai:model-1", OPENAI_BASE_URL=f"{llm.url}/v1")
    assert (state, detail) == ("ready", f"{llm.url}/v1/models answers")  # cut, so not a list to read names from


def test_a_hostile_model_list_cannot_break_the_line_or_reach_the_terminal() -> None:
    with FakeLLM(models=("evil\nmeta-agent: all fine \x1b[2J" + "x" * 500,)) as llm:
        ((_, _, detail),) = verdicts("openai:m", OPENAI_BASE_URL=f"{llm.url}/v1")
    assert "\n" not in detail and "\x1b" not in detail and len(detail) < 300, detail
    assert "evil meta-agent: all fine \\x1b[2J" in detail


# -- the command: its lines and exit codes --------------------------------------------------------------------------


def check(tmp_path: Path, **environ: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {}}))
    keys = ("META_AGENT_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "GEMINI_API_KEY")
    base = {key: value for key, value in os.environ.items() if key not in keys}
    command = [sys.executable, "-m", "meta_agent", "check", "--config", str(config)]
    return subprocess.run(command, capture_output=True, text=True, env={**base, **NO_OLLAMA, **environ}, timeout=60)


@pytest.mark.processes
@pytest.mark.parametrize(
    ("environ", "code", "lines"),
    [
        (  # the case: every call would fail, so check fails
            {"META_AGENT_MODEL": "foo:bar"},
            1,
            [
                "META_AGENT_MODEL=foo:bar",
                "  foo:bar  failed  unknown provider 'foo' (use openai:, anthropic:, ollama:, gemini: or sampling)",
                "no model of META_AGENT_MODEL can be used: see why above",
            ],
        ),
        ({}, 0, ["META_AGENT_MODEL is not set", "  none  host    a run needs the host's own model"]),
    ],
    ids=["unknown-provider", "not-set"],
)
def test_check_says_whether_a_run_could_start(tmp_path: Path, environ: dict, code: int, lines: list[str]) -> None:
    result = check(tmp_path, **environ)
    assert result.returncode == code, result.stdout + result.stderr
    said = result.stdout.splitlines()
    assert said[0].endswith("servers.json: 0 servers")
    assert [line[: len(expected)] for line, expected in zip(said[1:], lines, strict=True)] == lines
    assert result.stderr == ""


@pytest.mark.processes
def test_check_passes_with_a_local_server_that_answers(tmp_path: Path, llm: FakeLLM) -> None:
    result = check(tmp_path, META_AGENT_MODEL="openai:qwen3:latest", OPENAI_BASE_URL=f"{llm.url}/v1")
    assert result.returncode == 0, result.stdout
    assert result.stdout.splitlines()[1:] == [
        "META_AGENT_MODEL=openai:qwen3:latest",
        f"  openai:qwen3:latest  ready   {llm.url}/v1/models answers and lists qwen3:latest",
    ]
