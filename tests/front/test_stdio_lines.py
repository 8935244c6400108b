"""front/stdio/lines.py: what each line a host writes on stdio is (a message, or the answer it is owed), and lines
read within a bound."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import mcp.types as t
import pytest

from meta_agent.front.stdio.lines import LINE_LIMIT, Refusal, lines_within, screened

pytestmark = [pytest.mark.anyio, pytest.mark.quick]

NO_ANSWER = "no answer"
# A line, and what it is owed: (code, id) of the error answer, NO_ANSWER, or the message class it is.
CASES: list[tuple[bytes | None, object]] = [
    (b"not json\n", (t.PARSE_ERROR, None)),
    (b"\x00\n", (t.PARSE_ERROR, None)),
    (b'{"jsonrpc":"2.0","id":1,"method":"ping"}\x00\n', (t.PARSE_ERROR, None)),
    (b'{"jsonrpc":"2.0","id":1,"method":"\xff"}\n', (t.PARSE_ERROR, None)),  # not UTF-8
    (b'{"jsonrpc":"2.0","id":1,"method":"\\ud800"}\n', (t.PARSE_ERROR, None)),  # a lone surrogate
    (b"[" * 100_000 + b"\n", (t.PARSE_ERROR, None)),
    (b'{"a":' * 100_000 + b"\n", (t.PARSE_ERROR, None)),
    (b'{"jsonrpc":"2.0","id":1' + b"0" * 5000 + b',"method":"ping"}\n', (t.PARSE_ERROR, None)),
    (b'{"jsonrpc":"2.0","id":1,"method":"ping"\n', (t.PARSE_ERROR, None)),  # cut short
    (b"42\n", (t.INVALID_REQUEST, None)),
    (b"[]\n", (t.INVALID_REQUEST, None)),
    (b'"x"\n', (t.INVALID_REQUEST, None)),
    (b"null\n", (t.INVALID_REQUEST, None)),
    (b"{}\n", (t.INVALID_REQUEST, None)),
    (b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]\n', (t.INVALID_REQUEST, None)),  # a batch
    (b'{"jsonrpc":"2.0","id":8}\n', (t.INVALID_REQUEST, 8)),
    (b'{"id":9,"method":"tools/list"}\n', (t.INVALID_REQUEST, 9)),
    (b'{"jsonrpc":"1.0","id":"a","method":"tools/list"}\n', (t.INVALID_REQUEST, "a")),
    (b'{"jsonrpc":"2.0","id":10,"method":5}\n', (t.INVALID_REQUEST, 10)),
    (b'{"jsonrpc":"2.0","method":5}\n', (t.INVALID_REQUEST, None)),
    (b'{"jsonrpc":"2.0","id":7,"method":"tools/list","params":[]}\n', (t.INVALID_PARAMS, 7)),
    (b'{"jsonrpc":"2.0","id":"s","method":"tools/call","params":"x"}\n', (t.INVALID_PARAMS, "s")),
    (b'{"jsonrpc":"2.0","id":12,"method":"no/such","params":[1]}\n', (t.METHOD_NOT_FOUND, 12)),
    (None, (t.INVALID_REQUEST, None)),  # a line over the limit
    (b'{"jsonrpc":"2.0","method":"notifications/initialized","params":[]}\n', NO_ANSWER),
    (b'{"jsonrpc":"2.0","id":5,"error":"boom"}\n', NO_ANSWER),
    (b'{"jsonrpc":"2.0","id":5,"result":[]}\n', NO_ANSWER),
    (b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}\n', t.JSONRPCRequest),
    (b'{"jsonrpc":"2.0","id":"x","method":"tools/list","params":{}}\r\n', t.JSONRPCRequest),
    (b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n', t.JSONRPCNotification),
    (b'{"jsonrpc":"2.0","id":424242,"result":{}}\n', t.JSONRPCResponse),  # an unknown id: the session drops it
    (b"\n", None),
    (b" \t\r\n", None),
]
# A request whose id is no JSON-RPC id (MCP: a string or an integer) is owed -32600 with id null.
CASES += [
    (b'{"jsonrpc":"2.0","id":%s,"method":"tools/list"}\n' % bad, (t.INVALID_REQUEST, None))
    for bad in [b"[1]", b"{}", b"true", b"false", b"null", b"1.5", b"1.0", b"-0.0"]
]


@pytest.mark.parametrize(("line", "owed"), CASES)
def test_each_line_is_a_message_or_gets_what_it_is_owed(line: bytes | None, owed: object) -> None:
    got = screened(line)
    if owed is None or isinstance(owed, type):
        assert got is None if owed is None else isinstance(got, owed), got
        return
    assert isinstance(got, Refusal), got
    if owed == NO_ANSWER:
        assert got.answer is None
    else:
        assert got.answer is not None and (got.answer.error.code, got.answer.id) == owed
        assert "\n" not in got.answer.error.message
        wire = got.answer.model_dump_json(by_alias=True, exclude_unset=True)
        assert '"id":' in wire  # id null is written, not left out


def chunks(*parts: bytes) -> Callable[[], Awaitable[bytes]]:
    remaining = list(parts)

    async def receive() -> bytes:
        return remaining.pop(0) if remaining else b""

    return receive


async def lines(receive: Callable[[], Awaitable[bytes]], limit: int) -> list[bytes | None]:
    return [line async for line in lines_within(receive, limit)]


async def test_a_line_over_the_limit_is_one_none_wherever_the_chunks_cut() -> None:
    receive = chunks(b"ab\ncdefghijk", b"lmnop", b"qrstuv\nxy", b"z\n0123456789\n", b"0123456789abc")
    assert await lines(receive, 10) == [b"ab\n", None, b"xyz\n", b"0123456789\n", None]
    assert await lines(chunks(b"x" * 25, b"\n"), 10) == [None]
    assert await lines(chunks(b"x" * 25 + b"\nok\n"), 10) == [None, b"ok\n"]  # over the limit within one chunk
    assert await lines(chunks(b"0123456789"), 10) == [b"0123456789"]  # the last line, without its newline
    assert await lines(chunks(b"a\n", b"b\n\n"), LINE_LIMIT) == [b"a\n", b"b\n", b"\n"]
