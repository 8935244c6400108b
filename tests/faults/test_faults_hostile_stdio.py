"""The fault suite's hostile stdio group (tests/faults/test_faults.py describes the suite; the harness is
tests/fixtures/fault_harness.py).

hostile_stdio: a real `meta-agent serve` subprocess on raw stdio, in each protocol era, is sent what a careless or
hostile host writes, each line interleaved with valid requests: what is not JSON (NUL bytes, bytes that are not UTF-8,
JSON cut short or nested deeper than a parser goes, a number past any range), JSON that is no message (scalars,
arrays, batches, objects missing their parts, ids that are lists, objects, booleans, fractions or null, params that are
no object), responses no request asked for, a line over the line limit, thousands of bad lines at once, and a last bad
line cut short by the end of the input. Each line owed an answer gets exactly the JSON-RPC error it is owed, with its
id or id null; each owed none gets none; the valid requests around them are answered; the bad lines are logged in a
bounded number of lines that count every one of them; the server exits 0 when its stdin ends.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import mcp.types as t
import pytest
from fault_harness import group, injecting, log_to_a_list  # noqa: F401  (this module's fixtures)
from fault_tally import TALLY
from raw_stdio import Era, RawHost, raw_serving

from meta_agent.front.stdio.lines import LINE_LIMIT, LOG_EVERY

pytestmark = pytest.mark.anyio

GROUPS = {"hostile_stdio"}
TALLY.expected_groups |= GROUPS
CATEGORY = "hostile_input"

SILENT = None  # owed no answer
# Each line, and the (code, id) of the error it is owed, or SILENT.
HOSTILE: list[tuple[bytes, tuple[int, int | str | None] | None]] = [
    (b"not json", (t.PARSE_ERROR, None)),
    (b"\x00", (t.PARSE_ERROR, None)),
    (b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}\x00', (t.PARSE_ERROR, None)),
    (b'{"jsonrpc":"2.0","id":1,"method":"tools/\xff\xfe"}', (t.PARSE_ERROR, None)),
    (b'{"jsonrpc":"2.0","id":1,"method":"tools/list"', (t.PARSE_ERROR, None)),
    (b"[" * 200_000, (t.PARSE_ERROR, None)),
    (b'{"jsonrpc":"2.0","id":' + b"9" * 10_000 + b',"method":"tools/list"}', (t.PARSE_ERROR, None)),
    (b"42", (t.INVALID_REQUEST, None)),
    (b"[]", (t.INVALID_REQUEST, None)),
    (b'"x"', (t.INVALID_REQUEST, None)),
    (b"{}", (t.INVALID_REQUEST, None)),
    (b"true", (t.INVALID_REQUEST, None)),
    (b'[{"jsonrpc":"2.0","id":2,"method":"tools/list"}]', (t.INVALID_REQUEST, None)),
    (b'{"jsonrpc":"2.0","id":7,"method":"tools/list","params":[]}', (t.INVALID_PARAMS, 7)),
    (b'{"jsonrpc":"2.0","id":"seven","method":"tools/call","params":"x"}', (t.INVALID_PARAMS, "seven")),
    (b'{"jsonrpc":"2.0","id":71,"method":"no/such/method","params":[1]}', (t.METHOD_NOT_FOUND, 71)),
    (b'{"jsonrpc":"2.0","id":8}', (t.INVALID_REQUEST, 8)),
    (b'{"id":9,"method":"tools/list"}', (t.INVALID_REQUEST, 9)),
    (b'{"jsonrpc":2,"id":10,"method":"tools/list"}', (t.INVALID_REQUEST, 10)),
    (b'{"jsonrpc":"2.0","id":11,"method":["tools/list"]}', (t.INVALID_REQUEST, 11)),
    (b'{"jsonrpc":"2.0","id":[12],"method":"tools/list"}', (t.INVALID_REQUEST, None)),
    (b'{"jsonrpc":"2.0","id":{"a":13},"method":"tools/list"}', (t.INVALID_REQUEST, None)),
    (b'{"jsonrpc":"2.0","id":true,"method":"tools/list"}', (t.INVALID_REQUEST, None)),
    (b'{"jsonrpc":"2.0","id":null,"method":"tools/list"}', (t.INVALID_REQUEST, None)),
    (b'{"jsonrpc":"2.0","id":14.5,"method":"tools/list"}', (t.INVALID_REQUEST, None)),
    (b'{"jsonrpc":"2.0","method":"notifications/initialized","params":[]}', SILENT),
    (b'{"jsonrpc":"2.0","id":15,"error":"not an error object"}', SILENT),
    (b'{"jsonrpc":"2.0","id":424242,"result":{}}', SILENT),  # valid, and no request of ours has that id
    (b" \t \r", SILENT),
]
# Lines the server refuses (the log counts them): all but the valid response and the whitespace.
REFUSED = len(HOSTILE) - 2
FLOOD = 5000
# A line just over the limit, a valid request but for its length.
HUGE = b'{"jsonrpc":"2.0","id":16,"method":"tools/list","params":{"x":"' + b"a" * LINE_LIMIT + b'"}}\n'


@pytest.mark.parametrize("era", ["2025-11-25", "2026-07-28"])
async def test_hostile_stdio(era: Era, tmp_path: Path) -> None:
    async with (
        group("hostile_stdio", CATEGORY),
        raw_serving(tmp_path, era, {**os.environ, "META_AGENT_LOG_LEVEL": "info"}) as host,
    ):
        started = time.monotonic()
        await host.handshake()
        async with injecting(CATEGORY, len(HOSTILE) + 3) as faults:
            for line, owed in HOSTILE:
                await host.write(line + b"\n")
                if owed is SILENT:  # the next message out answers the next request: none was written for the line
                    assert {"ask", "agent"} <= await host.tool_names(), line
                else:
                    assert owed_answer(await host.message()) == owed, line[:100]
                faults.handled()
            await host.write(HUGE)
            assert owed_answer(await host.message()) == (t.INVALID_REQUEST, None)
            assert {"ask", "agent"} <= await host.tool_names()
            faults.handled()
            await host.write(b"x\n" * FLOOD)
            for _ in range(FLOOD):
                assert owed_answer(await host.message()) == (t.PARSE_ERROR, None)
            assert {"ask", "agent"} <= await host.tool_names()
            faults.handled()
            await ends_with_a_line_cut_short(host)
            faults.handled()
        check_the_log(tmp_path / "stderr.log", REFUSED + 1 + FLOOD + 1, time.monotonic() - started)


def owed_answer(message: dict[str, Any]) -> tuple[int, int | str | None]:
    assert set(message) == {"jsonrpc", "id", "error"}, message  # an error answer, its id written even when null
    return message["error"]["code"], message["id"]


async def ends_with_a_line_cut_short(host: RawHost) -> None:
    """The input ends in the middle of a bad line: it is answered, and the server exits 0 with nothing else to say."""
    await host.write(b'{"jsonrpc":"2.0","id":17,')
    assert host.process.stdin is not None
    await host.process.stdin.aclose()
    assert await host.exit_code() == 0
    assert [owed_answer(message) for message in await host.rest()] == [(t.PARSE_ERROR, None)]


def check_the_log(path: Path, refused: int, seconds: float) -> None:
    """Every stderr line is a JSON object; the bad lines are logged in at most one line a second (and a last one),
    which together count each of them; none says what the host sent."""
    records = [json.loads(line) for line in path.read_text().splitlines()]
    bad = [r for r in records if r["event"] in ("stdio_bad_line", "stdio_bad_lines")]
    assert len(bad) <= seconds / LOG_EVERY + 2, bad
    counted = sum(1 + r["more_since_last"] if r["event"] == "stdio_bad_line" else r["count"] for r in bad)
    assert counted == refused, bad
    assert "tools/list" not in path.read_text()
