"""The fault suite's trace group: run traces damaged the way disks, crashes and hands damage them, then read back by
`meta-agent runs` and `meta-agent runs show` (tests/faults/test_faults.py describes the suite; the harness is
tests/fixtures/fault_harness.py).

corrupted_traces: a real trace, written by a real run through our real front, is corrupted in seeded ways: cut at
any byte, lines replaced by what is not a JSON object, fields dropped or given the wrong type anywhere in a record,
lines swapped, NUL bytes, and the file or the directory replaced by what is not a trace (a directory, a FIFO, a
symlink loop). Each is checked: both commands exit 0 (or 2 for a run that cannot be shown) with at most one line on
stderr and no traceback, and a clean trace beside the damaged one is still listed as it was.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fake_llm import FakeLLM, openai_reply
from fault_harness import (  # noqa: F401  (this module's fixtures)
    answer_with,
    call,
    faulty_entry,
    finished,
    group,
    injecting,
    log_to_a_list,
    serving,
)
from fault_tally import TALLY

from meta_agent.cli.main import main

pytestmark = pytest.mark.anyio

GROUPS = {"corrupted_traces"}
TALLY.expected_groups |= GROUPS

CORRUPTIONS = 40
NOT_OBJECTS = ["[]", "1", '"s"', "null", "{", "", "[" * 100_000 + "]" * 100_000, '{"kind": {}}', "\x00\x00"]
WRONG_VALUES: list[Any] = [None, 1, -1, "x", [], {}, True, 1e308, [{"kind": "text"}]]


async def test_corrupted_traces(llm: FakeLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(1313)
    async with group("corrupted_traces", "corrupted_state"):
        damaged, clean = await two_real_traces(llm, tmp_path / "real")
        async with injecting("corrupted_state", CORRUPTIONS) as faults:
            for n in range(CORRUPTIONS):
                directory = tmp_path / f"c{n}"
                directory.mkdir()
                shutil.copy(clean, directory)
                target = directory / damaged.name
                shutil.copy(damaged, target)
                how = rng.choice(list(CORRUPT))
                CORRUPT[how](rng, target)
                monkeypatch.setenv("META_AGENT_TRACE_DIR", str(target if how == "dir_is_a_file" else directory))
                check_reading(damaged.stem, clean.stem, listed=how != "dir_is_a_file", why=f"#{n} {how}")
                faults.handled()


async def two_real_traces(llm: FakeLLM, directory: Path) -> tuple[Path, Path]:
    """Two runs through the real front: one thinks, calls a tool, is refused another and answers; one just answers."""
    child = faulty_entry(trust={"mutate": "ask"})
    async with serving(llm, {"f": child}, trace_dir=directory, conversations_db=directory / "c.db") as (client, _):
        calls = [("c1", "f__echo", {"text": "hello"}), ("c2", "f__mutate", {})]
        llm.reply(openai_reply(None, *calls, reasoning="think first"), match="[rich]")
        llm.reply(openai_reply("done", reasoning="and now"), match="[rich]")
        rich = finished(await call(client, "agent", {"task": "do it [rich]"}))
        answer_with(llm, "[plain]")
        plain = finished(await call(client, "agent", {"task": "nothing [plain]"}))
    return directory / f"{rich['run_id']}.jsonl", directory / f"{plain['run_id']}.jsonl"


def check_reading(damaged: str, clean: str, *, listed: bool, why: str) -> None:
    code, out, err = run_cli("runs")
    assert code == (0 if listed else 2), (why, code, err)
    if listed:
        rows = {line.split()[0]: line.split() for line in out[1:]}
        assert rows[clean][3] == "final", (why, out)
    show_code, show_out, show_err = run_cli("runs", "show", damaged)
    assert show_code in (0, 2), (why, show_code, show_err)
    if show_code == 2:
        assert show_out == [] and len(show_err) == 1, (why, show_out, show_err)
    else:
        assert show_out[-1].startswith("where time went: "), (why, show_out)


def run_cli(*args: str) -> tuple[int, list[str], list[str]]:
    """`meta-agent ARGS` in this process: exit code, stdout and stderr lines. A traceback would be an exception here;
    stderr holds at most one line, which says what went wrong or how much was skipped."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    lines = err.getvalue().splitlines()
    assert len(lines) <= 1 and all(line.startswith("meta-agent: ") for line in lines), lines
    return code, out.getvalue().splitlines(), lines


# -- the corruptions ----------------------------------------------------------------------------------------------------


def cut(rng: random.Random, path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: rng.randrange(len(data))])


def replace_line(rng: random.Random, path: Path) -> None:
    lines = path.read_text().splitlines()
    lines[rng.randrange(len(lines))] = rng.choice(NOT_OBJECTS)
    path.write_text("\n".join(lines) + "\n")


def edit_field(rng: random.Random, path: Path) -> None:
    """Somewhere inside one record, drop a field or give it a value of the wrong type."""
    lines = path.read_text().splitlines()
    index = rng.randrange(len(lines))
    record = json.loads(lines[index])
    container, key = _somewhere(rng, record)
    if isinstance(container, dict) and rng.random() < 0.5:
        del container[key]
    else:
        container[key] = rng.choice(WRONG_VALUES)
    lines[index] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n")


def _somewhere(rng: random.Random, value: Any) -> tuple[Any, Any]:
    """A random (container, key) reached by walking down from `value` (a dict with at least one key)."""
    container, key = value, rng.choice(list(value))
    while isinstance(child := container[key], dict | list) and child and rng.random() < 0.6:
        container, key = child, rng.choice(list(child)) if isinstance(child, dict) else rng.randrange(len(child))
    return container, key


def swap_lines(rng: random.Random, path: Path) -> None:
    lines = path.read_text().splitlines()
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    lines[i], lines[j] = lines[j], lines[i]
    path.write_text("\n".join(lines) + "\n")


def nul_bytes(rng: random.Random, path: Path) -> None:
    data = path.read_bytes()
    at = rng.randrange(len(data))
    path.write_bytes(data[:at] + b"\x00" * rng.randint(1, 64) + data[at:])


def invalid_utf8(rng: random.Random, path: Path) -> None:
    data = path.read_bytes()
    at = rng.randrange(len(data))
    path.write_bytes(data[:at] + bytes([0xFF, 0xC0, 0x80]) + data[at:])


def empty(_rng: random.Random, path: Path) -> None:
    path.write_bytes(b"\n" * 3)


def a_directory(_rng: random.Random, path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path.parent / "x.jsonl").mkdir()


def a_fifo(_rng: random.Random, path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def a_symlink_loop(_rng: random.Random, path: Path) -> None:
    path.unlink()
    path.symlink_to(path.name)


def a_dangling_symlink(_rng: random.Random, path: Path) -> None:
    path.unlink()
    path.symlink_to(path.parent / "gone.jsonl")


def dir_is_a_file(_rng: random.Random, _path: Path) -> None:
    """META_AGENT_TRACE_DIR names the trace file itself (the check points it there)."""


CORRUPT: dict[str, Callable[[random.Random, Path], None]] = {
    "cut": cut,
    "replace_line": replace_line,
    "edit_field": edit_field,
    "edit_field_again": edit_field,  # the richest corruption: drawn twice as often
    "swap_lines": swap_lines,
    "nul_bytes": nul_bytes,
    "invalid_utf8": invalid_utf8,
    "empty": empty,
    "a_directory": a_directory,
    "a_fifo": a_fifo,
    "a_symlink_loop": a_symlink_loop,
    "a_dangling_symlink": a_dangling_symlink,
    "dir_is_a_file": dir_is_a_file,
}
