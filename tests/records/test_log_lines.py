"""Log lines on stderr as real processes write them (records/logs.py, records/log_repeats.py): one JSON object a line
whatever a library logs (DBOS's and SQLAlchemy's tracebacks, asyncio's exception handler, warnings, a thread's
uncaught exception, a bad format string), one text line on a terminal, and a line repeated in a loop (an error of
the accept loop, a child writing its stderr as fast as it can) written about once a second with the count of the
rest, no line lost uncounted."""

from __future__ import annotations

import io
import json
import logging
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import structlog
from captured_logs import restored_logging
from conftest import FAULT_SERVER, free_port, http_serving, openai_env
from fake_llm import FakeLLM

from meta_agent.records.logs import configure_logging

BURST = 1000
SPAM = 3000
# asyncio's own handler of an accept loop out of file descriptors, called as its loop calls it, BURST times over
# about two seconds; the seconds it took on stdout.
ACCEPT_LOOP_FAILING = f"""
import asyncio, errno, socket, sys, time
from meta_agent.records.logs import configure_logging
configure_logging()
loop = asyncio.new_event_loop()
listener = socket.socket()
started = time.monotonic()
for n in range({BURST}):
    error = OSError(errno.EMFILE, "Too many open files")
    loop.call_exception_handler(
        {{"message": "socket.accept() out of system resource", "exception": error, "socket": listener}}
    )
    time.sleep(0.002)
print(time.monotonic() - started)
"""
# What libraries print of their own at debug level: DBOS set up as it sets itself up, then failing to launch against
# a closed port (SQLAlchemy's and psycopg's traceback), asyncio's never-retrieved task, a warning, a thread's
# uncaught exception, an exception nobody could raise, a bad format string, uvicorn's error logger.
LIBRARIES_FAILING = """
import asyncio, logging, sys, threading, warnings
from meta_agent.records.logs import configure_logging
configure_logging(sys.argv[1])
from dbos import DBOS
from dbos._logger import init_logger
init_logger()
DBOS(config={"name": "meta-agent", "system_database_url": sys.argv[2], "log_level": "WARNING"})
try:
    DBOS.launch()
except Exception:
    pass
DBOS.destroy()
try:
    {}["missing"]
except KeyError:
    logging.getLogger("dbos").exception("a step failed\\nsecond line")
    logging.getLogger("uvicorn.error").exception("Exception in ASGI application")

async def lost():
    async def fails():
        raise ValueError("never retrieved")
    asyncio.get_running_loop().create_task(fails())
    await asyncio.sleep(0.01)

asyncio.run(lost())
warnings.warn("a warning\\nover two lines")
thread = threading.Thread(target=lambda: 1 / 0)
thread.start()
thread.join()

class Unraisable:
    def __del__(self):
        raise RuntimeError("in __del__")

Unraisable()
logging.getLogger("sqlalchemy.pool").error("bad %s", "format", "arguments")
print("done")
"""


def python(script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120, env=env or dict(os.environ)
    )


def json_lines(stderr: str | list[str]) -> list[dict[str, Any]]:
    """Each line of `stderr` as the JSON object it must be (the command line's `meta-agent: ` notes aside)."""
    lines = stderr.splitlines() if isinstance(stderr, str) else [line.rstrip("\n") for line in stderr]
    parsed = []
    for line in lines:
        if line.startswith("meta-agent: "):
            continue
        try:
            value = json.loads(line)
        except ValueError:
            raise AssertionError(f"not a JSON line: {line!r}") from None
        assert isinstance(value, dict), line
        parsed.append(value)
    return parsed


def written_and_counted(lines: list[dict[str, Any]]) -> int:
    """How many lines these stand for: each itself and the `repeated` ones held back before it."""
    return sum(1 + line.get("repeated", 0) for line in lines)


def test_an_error_repeated_in_a_loop_is_written_about_once_a_second_with_the_count_of_the_rest() -> None:
    done = python(ACCEPT_LOOP_FAILING)
    assert done.returncode == 0, done.stderr
    seconds = float(done.stdout)
    lines = json_lines(done.stderr)
    failing = [line for line in lines if line["event"].startswith("socket.accept() out of system resource")]
    assert failing == lines, lines
    assert 2 <= len(failing) <= math.ceil(seconds) + 2, (seconds, failing)
    assert written_and_counted(failing) == BURST
    assert all(line["error"] == "OSError: [Errno 24] Too many open files" for line in failing)
    assert any(line.get("repeated", 0) > 100 for line in failing)


def test_a_child_spamming_its_stderr_is_written_about_once_a_second(llm: FakeLLM, tmp_path: Path) -> None:
    spam = f"import runpy, sys\nfor n in range({SPAM}): print(f'spam {{n}}', file=sys.stderr)\n"
    spam += f"sys.argv = [{str(FAULT_SERVER)!r}]\nrunpy.run_path(sys.argv[0], run_name='__main__')\n"
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"noisy": {"command": sys.executable, "args": ["-c", spam]}}}))
    started = time.monotonic()
    with http_serving(config, openai_env(llm, model="openai:fake-model", base=os.environ)) as (_, log):
        deadline = started + 60
        while written_and_counted(spammed(log.lines)) < SPAM and time.monotonic() < deadline:
            time.sleep(0.05)  # polled, with a bound: the last lines held back are written a second later
        seconds = time.monotonic() - started
        lines = spammed(log.lines)
        assert written_and_counted(lines) == SPAM, lines
        assert len(lines) <= math.ceil(seconds) + 2, (seconds, lines)
    json_lines(log.lines)


def spammed(lines: list[str]) -> list[dict[str, Any]]:
    return [line for line in json_lines(lines) if line["event"] == "child_stderr" and line["line"].startswith("spam ")]


@pytest.mark.parametrize("level", ["debug", "info"])
def test_a_librarys_traceback_is_inside_one_json_line(level: str) -> None:
    done = python(LIBRARIES_FAILING, level, f"postgresql://meta:pw@127.0.0.1:{free_port()}/gone")
    assert done.returncode == 0 and done.stdout == "done\n", done.stderr
    lines = json_lines(done.stderr)
    by_event = {line["event"].partition("\n")[0]: line for line in lines}
    field = "exception" if level == "debug" else "error"
    launch = by_event["DBOS failed to launch:"]
    assert launch["logger"] == "dbos" and "OperationalError" in launch[field]
    assert "ZeroDivisionError" in by_event["thread_exception"][field]
    assert "in __del__" in by_event["unraisable_exception"][field]
    assert "never retrieved" in by_event["Task exception was never retrieved"][field]
    assert by_event["a step failed"]["event"] == "a step failed\nsecond line"
    assert (
        "KeyError" in by_event["a step failed"][field]
        and "KeyError" in by_event["Exception in ASGI application"][field]
    )
    assert any("a warning\nover two lines" in line["event"] for line in lines if line["logger"] == "py.warnings")
    assert by_event["log_line_unwritable"]["logger"] == "sqlalchemy.pool"
    if level == "debug":
        assert launch["exception"].startswith("Traceback (most recent call last):")


def test_on_a_terminal_a_traceback_is_part_of_its_one_line() -> None:
    stream = io.StringIO()
    with restored_logging():
        configure_logging("debug", stream=stream, json=False)
        try:
            {}["missing"]
        except KeyError:
            logging.getLogger("dbos").exception("a step failed\nsecond line")
            structlog.get_logger("meta_agent.test").exception("ours_failed")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert "a step failed\\nsecond line" in lines[0] and "traceback='Traceback (most recent call last):\\n" in lines[0]
    assert "ours_failed" in lines[1] and "KeyError" in lines[1]
