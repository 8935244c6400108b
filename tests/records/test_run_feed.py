"""A run's events as its views read them (records/run_feed.py): text made safe and bounded, every part of an event
bounded however large what a model or a child sent, a run's events bounded in count and size with its end always
kept, a resumed run numbered on, and a database that fails costing the run nothing — against the store's own seam,
with SQLite for the rows."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog

from meta_agent.core import events as ev
from meta_agent.core.messages import ImagePart, TextPart
from meta_agent.core.result import RunResult, RunUsage
from meta_agent.records import run_feed
from meta_agent.records.run_feed import ARGUMENT_CHARS, TEXT_CHARS, RunFeed, shown, view_of
from meta_agent.store import run_events
from meta_agent.store.database import SqliteDatabase
from meta_agent.store.run_events import PAGE_EVENTS, RunEvents

pytestmark = [pytest.mark.anyio, pytest.mark.quick]


@pytest.mark.parametrize(
    ("text", "seen"),
    [
        ("plain\nlines\tand tabs", "plain\nlines\tand tabs"),
        ("\x1b[31mred\x1b[0m", "␛[31mred␛[0m"),
        ("carriage\rreturn\x00nul\x7fdel", "carriage␍return␀nul\u2421del"),
        ("abc\u202edcba\u2066x\u2069", "abc<U+202E>dcba<U+2066>x<U+2069>"),
        ("lone \ud800 surrogate", "lone \ufffd surrogate"),
        ("<script>alert(1)</script>", "<script>alert(1)</script>"),  # markup stays text: the page never parses it
    ],
)
def test_text_is_shown_safely(text: str, seen: str) -> None:
    assert shown(text) == (seen, False)


def finished(parts: Sequence[TextPart | ImagePart]) -> ev.ToolCallFinished:
    return ev.ToolCallFinished(step=1, call_id="c1", name="kid.big", ok=True, duration_ms=3, full_result=tuple(parts))


def test_a_huge_result_is_cut_and_its_images_counted() -> None:
    image = ImagePart(data="AAAA", mime_type="image/png")
    body = view_of(finished([TextPart(text="x" * 10_000_000), image, TextPart(text="more"), image]))
    assert body is not None and body["cut"] and body["images"] == 2
    assert body["text"].startswith("x" * TEXT_CHARS) and body["text"].endswith("more characters not shown]")
    assert len(body["text"]) < TEXT_CHARS + 100


def test_large_arguments_become_their_first_characters() -> None:
    small = view_of(ev.ToolCallStarted(step=1, call_id="c", name="k.t", arguments={"a": ["\x1b", {"\u202e": 1}]}))
    large = view_of(ev.ToolCallStarted(step=1, call_id="c", name="k.t", arguments={"a": "y" * 100_000}))
    assert small is not None and small["arguments"] == {"a": ["␛", {"<U+202E>": 1}]} and not small["cut"]
    assert large is not None and large["cut"] and isinstance(large["arguments"], str)
    assert large["arguments"].startswith('{"a": "yyy') and len(large["arguments"]) < ARGUMENT_CHARS + 100


def test_what_no_view_shows_is_left_out() -> None:
    assert view_of(ev.Heartbeat(step=1, waiting_for="model", elapsed_s=10)) is None
    assert view_of(ev.ChildProgress(step=1, call_id="c", name="k.t", progress=1, total=None, message="m")) is None


class Rows:
    """The store's seam (`EventRows`) in memory: what was appended, and a switch that makes it fail."""

    errors = (OSError,)

    def __init__(self, last: int = 0) -> None:
        self.rows: dict[int, dict[str, object]] = {}
        self.kept_before = last
        self.failing = False

    async def append(self, run_id: str, bodies: Sequence[tuple[int, str]]) -> None:
        if self.failing:
            raise OSError("disk full")
        for seq, body in bodies:
            self.rows.setdefault(seq, json.loads(body))

    async def last(self, run_id: str) -> int:
        return self.kept_before


def the_end() -> ev.RunFinished:
    return ev.RunFinished(
        result=RunResult(
            answer="done",
            stop_reason="final",
            run_id="r",
            steps=(),
            usage=RunUsage(model_calls=1, tool_calls=0, input_tokens=1, output_tokens=1),
        )
    )


async def test_a_run_keeps_at_most_so_many_events_and_always_its_end(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_feed, "MAX_EVENTS", 5)
    rows = Rows()
    feed = RunFeed(rows, "r")
    async with feed.writing():
        for step in range(1, 21):
            await feed(ev.ModelTurnStarted(step=step))
        await feed(the_end())
    kinds = [rows.rows[seq]["kind"] for seq in sorted(rows.rows)]
    assert kinds == ["model_turn"] * 5 + ["dropped", "run_finished"]
    assert rows.rows[6]["count"] == 15 and rows.rows[7]["answer"] == "done"


async def test_a_resumed_run_is_numbered_on_after_what_was_kept() -> None:
    rows = Rows(last=12)
    feed = RunFeed(rows, "r", resumed=True)
    async with feed.writing():
        await feed(ev.ModelTurnStarted(step=1))
    assert rows.rows == {
        13: {"kind": "resumed", "step": 0},
        14: {"kind": "model_turn", "step": 1, "final": False, "line": "step 1 · model"},
    }


async def test_a_database_that_fails_costs_the_run_nothing_and_is_said_once() -> None:
    rows = Rows()
    rows.failing = True
    feed = RunFeed(rows, "r")
    with structlog.testing.capture_logs() as logs:
        for step in range(1, 4):
            await feed(ev.ModelTurnStarted(step=step))
            await feed.flush()  # a batch tried, and failed, after each
        rows.failing = False
        await feed.flush()
    assert sorted(rows.rows) == [1, 2, 3]  # kept once the database came back
    assert [entry["event"] for entry in logs].count("run_events_not_written") == 1
    assert [entry["event"] for entry in logs].count("run_events_written") == 1


async def test_a_run_that_raises_leaves_with_its_own_error_and_its_events_kept() -> None:
    rows = Rows()
    feed = RunFeed(rows, "r")
    with pytest.raises(ValueError, match="the run's own"):
        async with feed.writing():
            await feed(ev.RunFailed(run_id="r", error="boom\nsecond line"))
            raise ValueError("the run's own")
    assert rows.rows[1] == {
        "kind": "run_failed",
        "step": 0,
        "error": "boom second line",
        "line": "failed · boom second line",
    }


async def test_the_store_pages_events_by_count_and_characters(tmp_path: Path) -> None:
    events = RunEvents(SqliteDatabase(tmp_path / "s.sqlite3"))
    await events.append("r", [(seq, json.dumps({"n": seq})) for seq in range(1, PAGE_EVENTS + 51)])
    await events.append("r", [(1, json.dumps({"n": "again"}))])  # one kept already is kept as it was
    first, more = await events.page("r", 0)
    rest, done = await events.page("r", first[-1][0])
    assert len(first) == PAGE_EVENTS and more and json.loads(first[0][1]) == {"n": 1}
    assert len(rest) == 50 and not done and await events.last("r") == PAGE_EVENTS + 50
    big = "z" * 600_000
    await events.append("big", [(1, big), (2, big), (3, big)])
    page, more = await events.page("big", 0)
    assert [seq for seq, _ in page] == [1] and more  # a page holds about PAGE_CHARS, and at least one event


async def test_each_event_keeps_its_progress_line_bounded_and_safe_and_the_latest_is_read_back(tmp_path: Path) -> None:
    """A task running on another replica reads with its latest progress line: kept with each event (cut, one line,
    its unsafe characters made visible), read back past the marks that have none (a resumed run's)."""
    events = RunEvents(SqliteDatabase(tmp_path / "s.sqlite3"))
    assert await events.line("r") is None
    async with (feed := RunFeed(events, "r")).writing():
        await feed(ev.Thinking(step=2, text="\x1b]8;;evil\x07" + "w " * 10_000))
    line = await events.line("r")
    assert line is not None and line.startswith("step 2 · thinking: ␛]8;;evil␇")
    assert len(line) <= run_feed.LINE_CHARS and "\n" not in line
    async with RunFeed(events, "r", resumed=True).writing():  # resumed: a `resumed` mark, which has no line, comes last
        pass
    assert json.loads((await events.page("r", 1))[0][-1][1])["kind"] == "resumed"
    assert await events.line("r") == line


async def test_a_run_that_starts_now_numbers_its_events_from_one_without_reading_and_writes_many_at_once(
    tmp_path: Path,
) -> None:
    """A run that starts now has no kept events to look for (one statement less a run); a batch longer than one
    statement takes is written whole, in order, and a row kept already stays as it was."""
    events = RunEvents(SqliteDatabase(tmp_path / "s.sqlite3"))
    await events.append("r", [(1, '{"kind": "kept"}')])
    many = [(seq, json.dumps({"kind": "n", "step": seq})) for seq in range(1, 2 * run_events.ROWS_AT_ONCE + 7)]
    await events.append("r", many)
    assert await events.last("r") == len(many)
    page, _ = await events.page("r", 0)
    assert [seq for seq, _ in page[:3]] == [1, 2, 3] and page[0][1] == '{"kind": "kept"}'
    async with (feed := RunFeed(events, "fresh")).writing():
        await feed(ev.Thinking(step=1, text="hello"))
    page, _ = await events.page("fresh", 0)
    assert [seq for seq, _ in page] == [1] and json.loads(page[0][1])["kind"] != "resumed"


class _Counted(SqliteDatabase):
    """The store's database, counting its transactions; failing them while `failing`."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.transactions = 0
        self.failing = False

    def run(self, work: Any, *args: Any) -> Any:
        if self.failing:
            raise sqlite3.OperationalError("disk I/O error")
        self.transactions += 1
        return super().run(work, *args)


async def test_runs_appending_at_once_share_a_transaction_and_each_hears_a_failure(tmp_path: Path) -> None:
    """50 runs' batches handed in at once are written in two transactions, not fifty, each kept under its own run;
    while the database fails, every run waiting is told, and what it hands in again later is kept."""
    database = _Counted(tmp_path / "s.sqlite3")
    events = RunEvents(database)
    await events.last("warm")  # the schema, made in a transaction of its own
    database.transactions = 0

    async def hand_in(n: int) -> None:
        await events.append(f"r{n}", [(1, json.dumps({"kind": "n", "run": n}))])

    async with anyio.create_task_group() as runs:
        for n in range(50):
            runs.start_soon(hand_in, n)
    assert database.transactions <= 2
    assert [await events.last(f"r{n}") for n in range(50)] == [1] * 50
    database.failing = True
    failed: list[str] = []

    async def refused(n: int) -> None:
        try:
            await hand_in(n)
        except sqlite3.OperationalError as exc:
            failed.append(str(exc))

    async with anyio.create_task_group() as runs:
        for n in range(50, 60):
            runs.start_soon(refused, n)
    assert failed == ["disk I/O error"] * 10
    database.failing = False
    await hand_in(50)
    assert await events.last("r50") == 1
