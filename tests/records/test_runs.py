"""`meta-agent runs` reading traces back: real traces of real runs (the real openai SDK against a fake model, a real
child), then damaged the way disks, crashes and hands damage them. A reader skips what it cannot read, says how much
it skipped, and never shows a traceback; a run whose process died is `interrupted`, not `running` forever."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import FAULT_SERVER, fault_entry, openai_env, processes_with
from fake_llm import FakeLLM, error_body, openai_reply

from meta_agent.cli.main import main
from meta_agent.config.settings import Settings
from meta_agent.engine import Engine
from meta_agent.errors import ProviderBadRequest

RUN_ID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"  # a ULID no real run has
WAIT = 60.0  # bound on a real subprocess reaching a state on a loaded 2-core machine
POLL = 0.05


@pytest.fixture(scope="module")
def sample_trace(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The lines of a real trace, its run id made RUN_ID: one call of f.echo ("hello"), then the answer "It said
    hello."."""
    directory = tmp_path_factory.mktemp("sample")

    async def one_run() -> str:
        with FakeLLM() as llm:
            llm.reply(openai_reply(None, ("c1", "f__echo", {"text": "hello"})))
            llm.reply(openai_reply("It said hello."))
            settings = Settings(model="openai:fake-model", trace_dir=directory, conversations_db=directory / "c.db")
            async with Engine(settings, {"f": fault_entry()}, openai_env(llm)) as engine:
                return (await engine.run("echo something", mode="agent")).run_id

    run_id = anyio.run(one_run)
    return (directory / f"{run_id}.jsonl").read_text().replace(run_id, RUN_ID).splitlines()


@pytest.fixture
def runs_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Callable[..., Any]:
    """`meta-agent runs ARGS` over the traces in tmp_path: (exit code, stdout lines, stderr lines)."""
    monkeypatch.setenv("META_AGENT_TRACE_DIR", str(tmp_path))

    def runs(*args: str) -> tuple[int, list[str], list[str]]:
        code = main(["runs", *args])
        out, err = capsys.readouterr()
        return code, out.splitlines(), err.splitlines()

    return runs


def write_trace(directory: Path, lines: list[str], run_id: str = RUN_ID) -> Path:
    path = directory / f"{run_id}.jsonl"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8", errors="surrogateescape")
    return path


def test_files_that_are_not_traces_are_skipped_and_counted(
    tmp_path: Path, sample_trace: list[str], runs_cli: Callable[..., Any]
) -> None:
    write_trace(tmp_path, sample_trace)
    (tmp_path / "x.jsonl").mkdir()
    (tmp_path / "01BX5ZZKBKACTAV9WEVGEMMVRZ.jsonl").mkdir()
    os.mkfifo(tmp_path / "01BX5ZZKBKACTAV9WEVGEMMVS0.jsonl")  # opening it to read would wait forever
    write_trace(tmp_path, sample_trace, run_id="notes")
    code, out, err = runs_cli()
    assert code == 0
    assert out[0] == f"{tmp_path}: 1 recent run (the traces in META_AGENT_TRACE_DIR; unset, this user's)"
    assert out[1].split()[0] == RUN_ID and out[1].split()[3] == "final"
    assert len(err) == 1 and err[0].startswith("meta-agent: runs: 4 unreadable traces skipped (")
    for not_a_trace in ("01BX5ZZKBKACTAV9WEVGEMMVRZ", "01BX5ZZKBKACTAV9WEVGEMMVS0"):
        code, out, err = runs_cli("show", not_a_trace)
        assert (code, out) == (2, []) and err == [
            f"meta-agent: runs: no trace of run {not_a_trace!r} in {tmp_path} (see `meta-agent runs`)"
        ]


NOT_RECORDS = {
    "an array": "[]",
    "a number": "1",
    "a string": '"s"',
    "null": "null",
    "nested 100000 deep": "[" * 100_000 + "]" * 100_000,
    "nested 100000 deep in an object": '{"kind": "thinking", "ts": "t", "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "no kind": '{"ts": "2026-01-01T00:00:00+00:00"}',
    "a kind that is a list": '{"kind": ["run_started"], "ts": "2026-01-01T00:00:00+00:00"}',
    "a run_started with no fields": '{"kind": "run_started"}',
    "a model_responded without its tokens": '{"kind": "model_responded", "ts": "2026-01-01T00:00:00+00:00"}',
    "a tool_call_finished without ok": '{"kind": "tool_call_finished", "ts": "t", "name": "f.echo", "duration_ms": 1}',
    "a tool result part that is not an object": (
        '{"kind": "tool_call_finished", "ts": "t", "name": "f.echo", "ok": true, "duration_ms": 1, "result": [1]}'
    ),
    "a response that is a list": (
        '{"kind": "model_responded", "ts": "t", "duration_ms": 1, "input_tokens": 1, "output_tokens": 1, "response": []}'
    ),
    "a run_finished without usage": '{"kind": "run_finished", "ts": "t", "result": {"answer": "a", "stop_reason": "x"}}',
    "a run_finished with a stop reason no run has": (  # read through the result's one definition, core.result.RunOut
        '{"kind": "run_finished", "ts": "t", "result": {"answer": "a", "stop_reason": "x", "run_id": "r", "steps": [], '
        '"usage": {"model_calls": 1, "tool_calls": 0, "input_tokens": 1, "output_tokens": 1}}}'
    ),
    "invalid UTF-8": "\udcff\udcfe",  # written as the bytes ff fe
}


@pytest.mark.parametrize("line", NOT_RECORDS.values(), ids=NOT_RECORDS.keys())
def test_a_line_that_is_not_a_record_is_skipped_and_counted(
    tmp_path: Path, sample_trace: list[str], runs_cli: Callable[..., Any], line: str
) -> None:
    write_trace(tmp_path, [sample_trace[0], line, *sample_trace[1:]])
    code, out, err = runs_cli()
    assert code == 0 and out[1].split()[0] == RUN_ID and out[1].split()[3] == "final"
    assert err == ["meta-agent: runs: 1 unreadable record skipped"]
    code, out, err = runs_cli("show", RUN_ID)
    assert code == 0
    assert out[1] == "task: echo something" and "  returned: hello" in out and "answer: It said hello." in out
    assert err == [f"meta-agent: runs show: 1 unreadable record skipped in {RUN_ID}.jsonl"]


def test_a_run_whose_last_record_was_cut_short_is_interrupted(
    tmp_path: Path, sample_trace: list[str], runs_cli: Callable[..., Any]
) -> None:
    """A process that died mid-write leaves half a line: what is whole is read, the half line is counted."""
    path = write_trace(tmp_path, sample_trace[:-1])
    with path.open("a") as file:
        file.write(sample_trace[-1][:40])
    code, out, err = runs_cli()
    assert code == 0 and out[1].split()[3] == "interrupted"
    assert err == ["meta-agent: runs: 1 unreadable record skipped"]
    code, out, err = runs_cli("show", RUN_ID)
    assert code == 0 and "  returned: hello" in out
    assert out[-2] == "interrupted · the process running it ended before the run did"


def test_a_trace_with_nothing_readable(tmp_path: Path, runs_cli: Callable[..., Any]) -> None:
    write_trace(tmp_path, ["[]", "garbage"])
    code, out, err = runs_cli("show", RUN_ID)
    assert (code, out) == (2, [])
    assert err == [f"meta-agent: runs: {tmp_path / RUN_ID}.jsonl holds no readable record (2 unreadable lines)"]
    code, out, err = runs_cli()
    assert code == 0 and out == [f"{tmp_path}: 0 recent runs (the traces in META_AGENT_TRACE_DIR; unset, this user's)"]
    assert err == [f"meta-agent: runs: 1 unreadable trace skipped ({RUN_ID}.jsonl)"]


def test_a_trace_directory_that_is_a_file(tmp_path: Path, runs_cli: Callable[..., Any], monkeypatch: Any) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("META_AGENT_TRACE_DIR", str(tmp_path / "file"))
    code, out, err = runs_cli()
    assert (code, out) == (2, []) and err == [f"meta-agent: runs: {tmp_path / 'file'} is not a directory"]


@pytest.mark.anyio
async def test_a_line_separator_inside_a_text_does_not_cut_its_record(
    tmp_path: Path, llm: FakeLLM, runs_cli: Callable[..., Any]
) -> None:
    """Only "\\n" ends a record: U+2028 or U+0085 in a tool's result is part of the text (str.splitlines would cut
    the record there)."""
    llm.reply(openai_reply(None, ("c1", "f__echo", {"text": "one\u2028two\x85three"})))
    llm.reply(openai_reply("done"))
    settings = Settings(model="openai:fake-model", trace_dir=tmp_path, conversations_db=tmp_path / "c.db")
    async with Engine(settings, {"f": fault_entry()}, openai_env(llm)) as engine:
        result = await engine.run("echo", mode="agent")
    code, out, err = runs_cli("show", result.run_id)
    assert code == 0 and err == []
    assert "  returned: one two three" in out


@pytest.mark.anyio
async def test_a_failed_run_is_listed_with_what_it_had_done(
    tmp_path: Path, llm: FakeLLM, runs_cli: Callable[..., Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """Its first step ran (12 + 7 tokens); the model refused the second turn."""
    llm.reply(openai_reply(None, ("c1", "f__echo", {"text": "hello"}), usage=(12, 7)))
    llm.reply(error_body("context too long"), 400)
    settings = Settings(model="openai:fake-model", trace_dir=tmp_path, conversations_db=tmp_path / "c.db")
    async with Engine(settings, {"f": fault_entry()}, openai_env(llm)) as engine:
        with pytest.raises(ProviderBadRequest):
            await engine.run("echo", mode="agent")
    capsys.readouterr()  # the run's log lines
    code, out, err = runs_cli()
    assert code == 0 and err == []
    assert out[1].split()[3:8] == ["error", "1", "step", "19", "tokens"]
    code, out, err = runs_cli("show", out[1].split()[0])
    assert code == 0 and err == []
    refused = "openai:fake-model: the request was refused (HTTP 400): context too long"
    assert out[-2] == f"failed · 1 model call, 1 tool call, 19 tokens · {refused}"


# -- a run killed mid-way ----------------------------------------------------------------------------------------------


@pytest.fixture
def hanging_run(tmp_path: Path, llm: FakeLLM) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """`meta-agent run` as a real subprocess, its model calling a tool that never returns; and its trace dir.
    Whatever happens, the process and its child are killed at the end."""
    marker = f"marker-{uuid.uuid4().hex}"
    config = tmp_path / "servers.json"
    config.write_text(
        json.dumps({"mcpServers": {"f": {"command": sys.executable, "args": [str(FAULT_SERVER), "--name", marker]}}})
    )
    traces = tmp_path / "traces"
    environ = openai_env(
        llm,
        model="openai:fake-model",
        base=os.environ,
        META_AGENT_TRACE_DIR=str(traces),
        META_AGENT_CONVERSATIONS_DB=str(tmp_path / "c.db"),
    )
    llm.reply(openai_reply(None, ("c1", "f__hang", {})))
    command = [sys.executable, "-m", "meta_agent", "run", "hang", "--config", str(config)]
    proc = subprocess.Popen(command, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc, traces
    finally:
        proc.kill()
        proc.wait(timeout=WAIT)
        for pid in processes_with(marker):  # its own process group outlives a SIGKILLed parent
            os.kill(pid, signal.SIGKILL)


def wait_for(what: str, predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not predicate():
        assert time.monotonic() < deadline, f"waited {WAIT:g} s for {what}"
        time.sleep(POLL)


def test_a_killed_run_is_interrupted_and_a_live_one_running(
    hanging_run: tuple[subprocess.Popen[bytes], Path], runs_cli: Callable[..., Any], monkeypatch: Any
) -> None:
    proc, traces = hanging_run
    monkeypatch.setenv("META_AGENT_TRACE_DIR", str(traces))

    def hanging() -> bool:
        return any('"kind": "tool_call_started"' in path.read_text() for path in traces.glob("*.jsonl"))

    wait_for("the run to call the hanging tool", hanging)
    (run_id,) = [path.stem for path in traces.glob("*.jsonl")]
    code, out, _ = runs_cli()
    assert code == 0 and out[1].split()[0] == run_id and out[1].split()[3] == "running"
    code, out, _ = runs_cli("show", run_id)
    assert code == 0 and out[-2] == "running · a live process is still writing this trace"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=WAIT)
    code, out, err = runs_cli()
    assert code == 0 and out[1].split()[3] == "interrupted" and err == []
    code, out, _ = runs_cli("show", run_id)
    assert code == 0 and out[-2] == "interrupted · the process running it ended before the run did"


def test_text_from_a_trace_reaches_the_terminal_without_control_characters(
    tmp_path: Path, sample_trace: list[str], runs_cli: Callable[..., Any]
) -> None:
    task = "\x1b[31mred\x1b[0m\rover\nnext " + "x" * 10_000
    write_trace(tmp_path, [line.replace('"echo something"', json.dumps(task)) for line in sample_trace])
    for args in ((), ("show", RUN_ID)):
        code, out, _ = runs_cli(*args)
        assert code == 0
        assert not any(char in line for line in out for char in "\x1b\r"), out
        shown = next(line for line in out if "red" in line)
        assert "\\x1b[31mred\\x1b[0m over next" in shown and len(shown) < 400  # CR and LF are white space


# -- with a shared database: the run index ----------------------------------------------------------------------------


def test_with_a_shared_database_runs_lists_every_replicas_runs_and_tells_one_run_elsewhere(
    database_url: str,
    llm: FakeLLM,
    runs_cli: Callable[..., Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A run of this process (its trace here), and one another replica runs (no trace here): both listed from the
    database; the other's told from its record there."""
    from meta_agent.store.database import PostgresDatabase
    from meta_agent.store.run_index import RunIndex

    llm.reply(openai_reply(None, ("c1", "f__echo", {"text": "hello"})))
    llm.reply(openai_reply("It said hello."))
    settings = Settings(model="openai:fake-model", trace_dir=tmp_path, database_url=database_url)

    async def runs() -> str:
        async with Engine(settings, {"f": fault_entry()}, openai_env(llm)) as engine:
            done = await engine.run("echo something", mode="agent")
        elsewhere = RunIndex(PostgresDatabase(database_url), "other-host:7:ABCDEF")
        async with elsewhere.running(RUN_ID, "plan", "plan the move"):  # left running: that replica died
            pass
        elsewhere.database.close()
        return done.run_id

    run_id = anyio.run(runs)
    capsys.readouterr()  # the engine's log
    monkeypatch.setenv("META_AGENT_DATABASE_URL", database_url)
    code, out, err = runs_cli()
    assert (code, err) == (0, [])
    assert out[0].endswith(": 2 recent runs") and "postgresql://" in out[0]
    listed = {line.split()[0]: line for line in out[1:]}
    assert "done" not in listed[RUN_ID] and "plan" in listed[RUN_ID] and "plan the move" in listed[RUN_ID]
    assert " final " in listed[run_id] and "2 steps" in listed[run_id] and "echo something" in listed[run_id]
    code, out, err = runs_cli("show", RUN_ID)
    assert (code, err) == (0, [])
    assert out[0].startswith(f"run {RUN_ID} · plan · ") and out[0].endswith(
        "on other-host:7:ABCDEF (its trace is there)"
    )
    assert out[1] == "task: plan the move" and out[2].startswith("running · since ") and len(out) == 3
    code, out, err = runs_cli("show", run_id)  # its trace is here: told from it, step by step
    assert code == 0 and "  returned: hello" in out
