"""Model settings that cannot work are said before any child starts: `meta-agent run`, `meta-agent serve` on stdio
and over HTTP exit 2 with one line naming the setting, and the servers.json's child, which leaves a file behind the
moment it is started, never was.

Real processes as a user starts them; no model endpoint is needed (nothing may reach one)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from conftest import free_port

from meta_agent.errors import ModelNotConfigured
from meta_agent.providers.model_setting import check_model_setting, default_model, setting_problem

META_AGENT = [sys.executable, "-m", "meta_agent"]
KEYS = ("META_AGENT_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "OLLAMA_HOST")
BOUND = 60.0  # seconds a command may take to give up: generous for a loaded machine (it takes well under one)

# (META_AGENT_MODEL, what the one line says); every one is bad input for `run` and for `serve` alike.
BAD_FOR_EVERY_COMMAND = [
    ("mistral:large", "META_AGENT_MODEL='mistral:large': unknown provider 'mistral'"),
    ("openai:", "META_AGENT_MODEL='openai:': name the model after the colon"),
    ("anthropic:claude-sonnet-5-5", "META_AGENT_MODEL=anthropic:claude-sonnet-5-5: set ANTHROPIC_API_KEY"),
    ("openai:gpt-5.5", "META_AGENT_MODEL=openai:gpt-5.5: set OPENAI_API_KEY (or OPENAI_BASE_URL for a local server)"),
    ("gemini:gemini-2.5-flash", "META_AGENT_MODEL=gemini:gemini-2.5-flash: set GEMINI_API_KEY"),
    ("openai:a,,ollama:b", "META_AGENT_MODEL='openai:a,,ollama:b': an empty entry in the fallback chain"),
    (
        "anthropic:a,gemini:b",
        "META_AGENT_MODEL='anthropic:a,gemini:b': no model of the chain can be used here: anthropic:a: set "
        "ANTHROPIC_API_KEY; gemini:b: set GEMINI_API_KEY",
    ),
]
# Bad for `run` only: `serve`'s host may lend its own model through sampling.
BAD_FOR_RUN = [
    ("", "no model is configured: set META_AGENT_MODEL"),
    ("sampling", "META_AGENT_MODEL=sampling: only a host can lend its model"),
]


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "the child was started"


@pytest.fixture
def config(tmp_path: Path, marker: Path) -> Path:
    """A servers.json whose one child is `touch MARKER`: started at all, it leaves the file."""
    touch = shutil.which("touch")
    assert touch is not None
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": {"witness": {"command": touch, "args": [str(marker)]}}}))
    return path


def environment(model: str) -> dict[str, str]:
    """No model setting but `model`, no API key, and no Ollama (a port where nothing listens)."""
    environ = {key: value for key, value in os.environ.items() if key not in KEYS}
    return {**environ, "META_AGENT_MODEL": model, "OLLAMA_HOST": f"127.0.0.1:{free_port()}"}


def refused(config: Path, model: str, *command: str) -> str:
    """What `meta-agent COMMAND` says as it exits 2; it must exit within BOUND (a serve that starts never does)."""
    process = subprocess.Popen(
        [*META_AGENT, *command, "--config", str(config)],
        stdin=subprocess.PIPE,  # held open: a stdio server that started would serve, not exit
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(model),
    )
    try:
        out, err = process.communicate(timeout=BOUND)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail(f"meta-agent {' '.join(command)} with META_AGENT_MODEL={model!r} did not refuse to start")
    assert (process.returncode, out) == (2, ""), err
    return err


@pytest.mark.parametrize(("model", "message"), BAD_FOR_EVERY_COMMAND + BAD_FOR_RUN)
def test_run_says_it_in_one_line_before_any_child_starts(config: Path, marker: Path, model: str, message: str) -> None:
    err = refused(config, model, "run", "What time is it?")
    assert err.count("\n") == 1 and err.startswith(f"meta-agent: {message}"), err
    assert not marker.exists()


@pytest.mark.parametrize(("model", "message"), BAD_FOR_EVERY_COMMAND)
@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_serve_says_it_in_one_line_before_any_child_starts(
    config: Path, marker: Path, transport: str, model: str, message: str
) -> None:
    err = refused(config, model, "serve", "--transport", transport, "--port", str(free_port()))
    assert err.count("\n") == 1 and err.startswith(f"meta-agent: {message}"), err
    assert not marker.exists()


@pytest.mark.parametrize(
    ("model", "environ", "can_sample"),
    [
        ("ollama:qwen3", {}, False),  # Ollama needs no key; whether it runs is the run's to find
        ("openai:local", {"OPENAI_BASE_URL": "http://127.0.0.1:1/v1"}, False),  # a local server takes any key
        ("gemini:g,openai:m", {"OPENAI_API_KEY": "sk"}, False),  # a chain goes on past a model it cannot use
        ("sampling", {}, True),
        ("", {}, False),  # not set: `default_model` looks
    ],
)
def test_settings_that_can_work_pass(model: str, environ: dict[str, str], can_sample: bool) -> None:
    check_model_setting(model, environ, can_sample=can_sample)
    if model and "," not in model:
        assert setting_problem(model, environ, can_sample) is None


def test_no_model_anywhere_is_found_missing() -> None:
    with pytest.raises(ModelNotConfigured, match=r"^no model is configured: set META_AGENT_MODEL"):
        anyio.run(default_model, {"OLLAMA_HOST": f"127.0.0.1:{free_port()}"})
    assert anyio.run(default_model, {"ANTHROPIC_API_KEY": "k"}) == "anthropic:claude-sonnet-5-5"


def test_the_checks_load_no_vendor_sdk_and_no_other_provider_module() -> None:
    # They run before every `run` and `serve`: a vendor SDK takes half a second to import, and the adapters need one.
    probe = (
        "from meta_agent.providers.model_setting import check_model_setting\n"
        "check_model_setting('anthropic:a,openai:b', {'OPENAI_API_KEY': 'k'}, can_sample=False)\n"
        "import sys, json; print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=BOUND)
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout.splitlines()[-1])
    assert "meta_agent.providers.model_setting" in loaded
    assert not [name for name in loaded if name.split(".")[0] in ("openai", "anthropic", "aiohttp")]
    providers = [name for name in loaded if name.startswith("meta_agent.providers.")]
    assert providers == ["meta_agent.providers.model_setting"], providers
