"""The `meta-agent` command as a user runs it: a real subprocess, real children, exit codes, no orphans."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import httpx2
import pytest
from conftest import EVERYTHING, FAULT_SERVER, TIME_COMMAND, free_port, processes_with

META_AGENT = [sys.executable, "-m", "meta_agent"]


# image_gen's default backend: OpenAI itself (no OPENAI_BASE_URL), with a key.
OPENAI_ITSELF = {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": "", "META_AGENT_IMAGE_MODEL": ""}


def write_config(tmp_path: Path, servers: dict) -> Path:
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


def fault(marker: str, *flags: str) -> dict:
    return {"command": sys.executable, "args": [str(FAULT_SERVER), "--name", marker, *flags]}


def run(*args: str, timeout: float = 90, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*META_AGENT, *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )


@pytest.fixture
def marker() -> str:
    return f"marker-{uuid.uuid4().hex}"


def test_check_reports_each_child_and_fails_when_one_does(tmp_path: Path, marker: str) -> None:
    config = write_config(
        tmp_path,
        {
            "time": TIME_COMMAND,
            "every": {"command": "node", "args": [str(EVERYTHING), "stdio"]},
            "crash": fault(marker, "--exit-at-start"),
            "stubborn": fault(marker, "--stubborn"),
            "nope": {"command": "no-such-command-xyz"},
            "off": {"command": "${UNSET_BUT_DISABLED}", "disabled": True},
        },
    )
    result = run("check", "--config", str(config))
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"{config}: 6 servers"
    by_name = {line.split()[0]: line for line in lines[1:7]}
    assert by_name["time"].split()[1:5] == ["ready", "stdio", "2026-07-28", "2"]
    assert by_name["every"].split()[1:5] == ["ready", "stdio", "2025-11-25", "16"]  # 13, plus 3 that ask the client
    assert (
        "failed  the server exited during start-up; its stderr ended with: fault_server: refusing" in by_name["crash"]
    )
    assert by_name["stubborn"].split()[1] == "ready"
    assert "failed  command not found: no-such-command-xyz" in by_name["nope"]
    assert by_name["off"].split()[1] == "disabled"
    assert lines[-1] == "2 of 6 failed: crash, nope"
    assert "Traceback" not in result.stderr
    assert processes_with(marker) == []


def test_check_passes_and_a_never_starting_child_is_bounded(tmp_path: Path, marker: str) -> None:
    ok = run("check", "--config", str(write_config(tmp_path, {"time": TIME_COMMAND})))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    stuck = run(
        "check", "--start-timeout", "2", "--config", str(write_config(tmp_path, {"s": fault(marker, "--never-start")}))
    )
    assert stuck.returncode == 1
    assert "s  failed  no answer within 2 s" in stuck.stdout
    assert processes_with(marker) == []


def test_an_http_child_in_check(tmp_path: Path, everything_http: str) -> None:
    result = run("check", "--config", str(write_config(tmp_path, {"web": {"url": everything_http}})))
    assert result.returncode == 0, result.stdout
    assert result.stdout.splitlines()[1].split()[1:4] == ["ready", "http", "2025-11-25"]


def test_tools_lists_internal_tools_first_then_each_child(tmp_path: Path, marker: str) -> None:
    config = write_config(
        tmp_path,
        {
            "time": {**TIME_COMMAND, "trust": {"convert_time": "never"}},
            "f": {**fault(marker), "tools": {"allow": ["echo", "delete_file"]}},
            "nope": {"command": "no-such-command-xyz"},
        },
    )
    result = run("tools", "--config", str(config), env=OPENAI_ITSELF)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "internal · 3 tools"
    assert lines[1].split() == ["image_gen", "read-only,", "open-world", "always", "(read-only)"]
    assert lines[2].split() == ["describe_image", "read-only,", "open-world", "always", "(read-only)"]
    assert lines[3].split() == ["read_result", "read-only,", "idempotent", "always", "(read-only)"]
    lines = lines[2:]  # the children as before describe_image and read_result
    assert lines[2].startswith("time · ready")
    assert lines[3].split()[0] == "time.get_current_time"
    assert lines[3].split()[-2:] == ["always", "(read-only)"]
    assert lines[4].split()[0] == "time.convert_time"
    assert lines[4].split()[-3:] == ["never", "(trust", "'convert_time')"]
    assert lines[5].startswith("f · ready")
    assert [line.split()[0] for line in lines[6:8]] == ["f.echo", "f.delete_file"]
    assert lines[7].split()[1:] == ["destructive", "ask", "(not", "read-only)"]
    # f's other tools, withheld by tools.allow, follow its own; a server that never started has no tool rows
    withheld = lines[8:-1]
    assert "  f.crash  withheld: not in tools.allow" in withheld and len(withheld) > 5
    assert all(line.startswith("  f.") and line.endswith("  withheld: not in tools.allow") for line in withheld)
    assert lines[-1] == "nope · failed  command not found: no-such-command-xyz"
    assert processes_with(marker) == []


def test_tools_as_json_and_internal_tools_setting(tmp_path: Path) -> None:
    servers = {"time": {**TIME_COMMAND, "tools": {"deny": ["convert_*"]}}, "off": {**TIME_COMMAND, "disabled": True}}
    config = write_config(tmp_path, servers)
    result = run("tools", "--json", "--config", str(config), env={"META_AGENT_INTERNAL_TOOLS": ""})
    assert result.returncode == 0, result.stderr
    box = json.loads(result.stdout)
    assert [(s["name"], s["status"], s["tool_count"]) for s in box["servers"]] == [
        ("time", "ready", 1),
        ("off", "disabled", 0),
    ]
    assert box["servers"][0]["protocol_version"] == "2026-07-28"
    # the tools offered, then those withheld; the disabled server never started, so it has no tool rows
    names = ["time.get_current_time", "image_gen", "describe_image", "read_result", "time.convert_time"]
    assert [t["name"] for t in box["tools"]] == names
    assert box["tools"][0]["alias"] == "time__get_current_time"
    assert box["tools"][0]["annotations"]["readOnlyHint"] is True
    assert [(t["enabled"], t["withheld"]) for t in box["tools"]] == [
        (True, None),
        (False, "META_AGENT_INTERNAL_TOOLS leaves it out"),
        (False, "META_AGENT_INTERNAL_TOOLS leaves it out"),
        (False, "META_AGENT_INTERNAL_TOOLS leaves it out"),
        (False, "denied by tools.deny pattern 'convert_*'"),
    ]
    convert = box["tools"][4]
    assert (convert["alias"], convert["server"], convert["trust"]) == ("time__convert_time", "time", "always")


def test_tools_says_why_image_gen_is_withheld_against_a_local_server(tmp_path: Path) -> None:
    local = {"OPENAI_BASE_URL": "http://127.0.0.1:8080/v1", "OPENAI_API_KEY": "none", "META_AGENT_IMAGE_MODEL": ""}
    result = run("tools", "--config", str(write_config(tmp_path, {})), env=local)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "internal · 2 tools",
        "  describe_image  read-only, open-world  always (read-only)",
        "  read_result     read-only, idempotent  always (read-only)",
        (
            "  image_gen  withheld: META_AGENT_IMAGE_MODEL is not set and OPENAI_BASE_URL points at 127.0.0.1, not"
            " OpenAI: set META_AGENT_IMAGE_MODEL=openai:MODEL if that server has an images endpoint"
        ),
    ]


def test_child_stderr_never_reaches_stdout(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"every": {"command": "node", "args": [str(EVERYTHING), "stdio"]}})
    result = run("tools", "--config", str(config), "--log-level", "info")
    assert "Starting default (STDIO) server" not in result.stdout
    assert "Starting default (STDIO) server" in result.stderr  # it went to our log


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["check", "--config", "/nonexistent/servers.json"], "/nonexistent/servers.json: no such file"),
        (["tools", "--config", "{bad}"], "servers.json:1:2: invalid JSON"),
        (["check", "--config", "{unknown}"], "mcpServers.a.comand: unknown key 'comand' (did you mean 'command'?)"),
        (["frobnicate"], "argument COMMAND: invalid choice: 'frobnicate'"),
        (
            ["check", "--start-timeout", "soon"],
            "argument --start-timeout: must be a positive number of seconds, got 'soon'",
        ),
        (
            ["tools", "--start-timeout", "nan"],
            "argument --start-timeout: must be a positive number of seconds, got 'nan'",
        ),
        (["run", "x", "--max-steps", "0"], "argument --max-steps: must be a whole number of at least 1, got '0'"),
        (["run", "x", "--mode", "chat"], "argument --mode: invalid choice: 'chat'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    contents = {"{bad}": "{,", "{unknown}": json.dumps({"mcpServers": {"a": {"comand": "x"}}})}
    args = [str(_materialise(tmp_path, a, contents)) if a in contents else a for a in args]
    result = run(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert message in result.stderr


def _materialise(tmp_path: Path, key: str, contents: dict[str, str]) -> Path:
    path = tmp_path / "servers.json"
    path.write_text(contents[key])
    return path


def test_a_bad_setting_is_one_line_and_exit_2(tmp_path: Path) -> None:
    config = write_config(tmp_path, {})
    result = run("check", "--config", str(config), env={"META_AGENT_INTERNAL_TOOLS": "imagegen"})
    assert result.returncode == 2
    assert result.stderr == (
        "meta-agent: META_AGENT_INTERNAL_TOOLS: unknown internal tool 'imagegen' (did you mean 'image_gen'?)\n"
    )


def test_config_comes_from_the_environment(tmp_path: Path) -> None:
    config = write_config(tmp_path, {})
    result = run("check", env={"META_AGENT_CONFIG": str(config)})
    assert (result.returncode, result.stdout.splitlines()[0]) == (0, f"{config}: 0 servers")


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_stops_every_child(tmp_path: Path, marker: str, signum: int, code: int) -> None:
    """SIGHUP too: only `serve` reloads on it (tests/toolbox/test_reload.py)."""
    config = write_config(
        tmp_path,
        {"ready": fault(marker), "stubborn": fault(marker, "--stubborn"), "stuck": fault(marker, "--never-start")},
    )
    proc = subprocess.Popen(
        [*META_AGENT, "check", "--config", str(config)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith(str(config))
    assert proc.stdout.readline().split()[:2] == ["ready", "ready"]  # children are up; "stuck" is still starting
    assert len(processes_with(marker)) == 3
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code
    assert err.strip().endswith(f"meta-agent: stopped by {signal.Signals(signum).name}")
    assert processes_with(marker) == []


def test_the_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "meta-agent"
    result = subprocess.run([str(script), "--version"], capture_output=True, text=True)
    assert result.returncode == 0
    assert result.stdout.startswith("meta-agent ")


# The command line in a process of its own, reporting its exit code and which SDKs it loaded on the way.
SDKS_LOADED = """
import sys
from meta_agent.cli.main import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:  # --help and a bad argument end in the parser
    code = exc.code
loaded = sorted({name.split(".")[0] for name in sys.modules} & {"mcp", "openai", "anthropic", "uvicorn"})
print(code, *loaded, file=sys.stderr)
"""


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--help"], 0),
        (["run", "--help"], 0),
        (["run", "x", "--max-steps", "0"], 2),
        (["run", "x", "--config", "missing.json"], 2),
    ],
)
def test_help_and_bad_input_load_no_sdk(tmp_path: Path, args: list[str], code: int) -> None:
    """They answer without the MCP SDK or a vendor SDK, whose imports would cost every such answer most of a
    second."""
    command = [sys.executable, "-c", SDKS_LOADED, *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=90, cwd=tmp_path)
    assert result.stderr.splitlines()[-1] == str(code), result.stderr


RICH_PROBE = """
import os, sys
import meta_agent.cli.main
import structlog.dev
from meta_agent.config.settings import load_settings
from meta_agent.front.server import build_server
from meta_agent.records.logs import configure_logging
configure_logging("warning")
build_server(load_settings(), {}, os.environ)  # the SDK's server would set up a rich log handler
before = sorted(name for name in ("rich", "greenlet") if name in sys.modules)
import rich, greenlet
print(before or "neither", structlog.dev.rich, rich.MARK, greenlet.MARK)
"""


def test_the_command_line_and_server_import_neither_rich_nor_greenlet(tmp_path: Path) -> None:
    """structlog imports rich and greenlet where they are installed, and the SDK's MCPServer rich (tens of
    milliseconds of every start, meta_agent.shared.unimported); the command line and our server hide them from those imports
    only. Stand-ins on the path show whether anything took them, and that a later import still finds them."""
    for name in ("rich", "greenlet"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"MARK = 'stand-in-{name}'\n")
    # a run of these tests against another work tree's source keeps that source, after the stand-ins
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(
        [sys.executable, "-c", RICH_PROBE], capture_output=True, text=True, timeout=90, cwd=tmp_path, env=env
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["neither", "None", "stand-in-rich", "stand-in-greenlet"]


@pytest.mark.parametrize("args", [["serve"], ["tools", "--json"]])
def test_the_server_on_stdio_and_the_other_commands_import_no_uvicorn(tmp_path: Path, args: list[str]) -> None:
    """The SDK's server imports sse_starlette, which imports uvicorn where it is installed only to wrap its signal
    handler; commands that serve no HTTP import the SDK without it (meta_agent.shared.unimported). A stand-in on the
    path leaves a mark where anything tried to import it."""
    mark = tmp_path / "uvicorn-imported"
    (tmp_path / "uvicorn").mkdir()
    (tmp_path / "uvicorn" / "__init__.py").write_text(f"open({str(mark)!r}, 'w').close()\nraise ImportError\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    config = write_config(tmp_path, {})
    command = [sys.executable, "-m", "meta_agent", *args, "--config", str(config)]
    # stdin at its end: the server answers nobody and stops
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=90, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL
    )
    assert result.returncode == 0, result.stderr
    assert not mark.exists()


ATEXIT_PROBE = """
import atexit, sys
from meta_agent.cli.main import entry
atexit.register(lambda: print("atexit ran"))  # unflushed: exit_now must flush it
sys.argv = ["meta-agent", *sys.argv[1:]]
entry()
"""


def test_the_console_script_runs_atexit_callbacks_and_flushes_before_it_exits(tmp_path: Path) -> None:
    """`entry` skips the interpreter's teardown, not what exit does first: a large answer written to a pipe arrives
    whole, then what an atexit callback printed, and the exit code is the command's."""
    config = write_config(tmp_path, {f"s{i}": {"command": "x", "disabled": True} for i in range(300)})
    command = [sys.executable, "-c", ATEXIT_PROBE, "tools", "--json", "--config", str(config)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=90, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    answer, _, after = result.stdout.rpartition("}")
    assert len(json.loads(answer + "}")["servers"]) == 300
    assert after.strip() == "atexit ran"
    failing = subprocess.run(
        [sys.executable, "-c", ATEXIT_PROBE, "run", "x", "--config", str(tmp_path / "missing.json")],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=tmp_path,
    )
    assert (failing.returncode, failing.stdout.strip()) == (2, "atexit ran"), failing.stderr


def test_a_second_signal_does_not_cut_the_shutdown_short(tmp_path: Path, marker: str) -> None:
    config = write_config(tmp_path, {"ready": fault(marker), "stubborn": fault(marker, "--stubborn")})
    proc = subprocess.Popen(
        [*META_AGENT, "tools", "--config", str(config), "--start-timeout", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "META_AGENT_LOG_LEVEL": "info"},
    )
    assert proc.stderr is not None
    ready = 0
    for line in proc.stderr:  # both children report ready in the log
        ready += '"child_ready"' in line
        if ready == 2:
            break
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143
    assert "Traceback" not in err
    assert processes_with(marker) == []


def test_a_closed_pipe_is_not_a_traceback(tmp_path: Path, marker: str) -> None:
    # 3000 tools make more output than a pipe holds, so writing surely fails after `head` has gone.
    config = write_config(tmp_path, {"f": fault(marker, "--extra-tools", "3000")})
    shell = f"{sys.executable} -m meta_agent tools --config {config} | head -1"
    result = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=90)
    assert result.stdout.startswith("internal")
    assert "Traceback" not in result.stderr and "Error" not in result.stderr


@pytest.mark.parametrize("problem", ["taken port", "bad allowed host"])
def test_serve_http_that_cannot_listen_is_one_line_and_exit_2(tmp_path: Path, marker: str, problem: str) -> None:
    """A port someone else holds (or an --allowed-host that is no host): one line naming it, exit 2, and no child
    was started first."""
    config = write_config(tmp_path, {"f": fault(marker)})
    with socket.create_server(("127.0.0.1", 0)) as held:
        port = held.getsockname()[1]
        extra = ["--allowed-host", "localhost:80@evil.example"] if problem == "bad allowed host" else []
        result = run("serve", "--transport", "http", "--port", str(port), "--config", str(config), *extra, timeout=30)
    assert (result.returncode, result.stdout) == (2, "")
    assert (
        result.stderr
        == {
            "taken port": f"meta-agent: --port: cannot listen on 127.0.0.1:{port}: address already in use\n",
            "bad allowed host": "meta-agent: --allowed-host: 'localhost:80@evil.example' is not a host or host:port "
            "(e.g. example.com, example.com:8765, [::1])\n",
        }[problem]
    )


def has_ipv6() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not has_ipv6(), reason="this machine has no IPv6")
def test_serve_http_on_host_all_ipv6_addresses_answers_on_ipv4_too(tmp_path: Path) -> None:
    """`--host ::` means every address of the machine, as with other servers: an IPv6-only socket refused 127.0.0.1."""
    port = free_port()
    command = ["serve", "--transport", "http", "--host", "::", "--port", str(port)]
    proc = subprocess.Popen(
        [*META_AGENT, *command, "--config", str(write_config(tmp_path, {}))], stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    try:
        assert any('"serving_http"' in line for line in proc.stderr), "the server did not start"
        for address in ("127.0.0.1", "[::1]"):
            assert httpx2.get(f"http://{address}:{port}/health", timeout=30).json()["status"] == "ok", address
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
