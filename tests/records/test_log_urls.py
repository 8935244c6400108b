"""Every URL in a log line is cut to its scheme, host, port and path (records/logs.py `urls_cut`), through the real
handler configure_logging sets up: our own lines and their fields however nested, a library's line, a traceback at
debug level, a line that cannot be formatted, and the copy a log tap (a host's) is handed. Text that holds no URL is
written as it came."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Mapping
from typing import Any

import pytest
import structlog
from captured_logs import logged_to

from meta_agent.records.logs import add_log_tap

SECRET = "s3cr3t-in-a-url"
WITH_SECRETS = f"https://someone:{SECRET}@api.example:8443/v1/hook?token={SECRET}#{SECRET}"
SHOWN = "https://api.example:8443/v1/hook"


def lines_of(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_our_own_lines_fields_are_cut_wherever_they_hold_a_url() -> None:
    stream = io.StringIO()
    with logged_to(stream):
        structlog.get_logger("meta_agent.test").warning(
            "child_down",
            error=f"cannot reach {WITH_SECRETS}: ConnectError",
            urls=[WITH_SECRETS, ("tuple", WITH_SECRETS)],
            nested={"inner": {"url": WITH_SECRETS}},
            count=3,
        )
    (line,) = lines_of(stream)
    assert SECRET not in json.dumps(line)
    assert line["error"] == f"cannot reach {SHOWN}: ConnectError"
    assert line["urls"] == [SHOWN, ["tuple", SHOWN]]
    assert line["nested"] == {"inner": {"url": SHOWN}}
    assert line["count"] == 3


def test_a_librarys_line_is_cut_as_it_is_formatted() -> None:
    """httpx2 logs each request's URL whole; the MCP SDK quotes a redirect's location."""
    stream = io.StringIO()
    with logged_to(stream):
        logging.getLogger("httpx2").info('HTTP Request: %s %s "%s %d %s"', "POST", WITH_SECRETS, "HTTP/1.1", 200, "OK")
        logging.getLogger("mcp.client.streamable_http").warning(f"Redirect to {WITH_SECRETS} not followed")
    first, second = lines_of(stream)
    assert first["event"] == f'HTTP Request: POST {SHOWN} "HTTP/1.1 200 OK"'
    assert second["event"] == f"Redirect to {SHOWN} not followed"


def test_a_traceback_at_debug_level_is_cut() -> None:
    """An httpx2 status error says its URL; at debug level the whole traceback is written, message and all."""
    stream = io.StringIO()
    with logged_to(stream, level="debug"):
        try:
            raise RuntimeError(f"Client error '401 Unauthorized' for url '{WITH_SECRETS}'")
        except RuntimeError:
            logging.getLogger("mcp.client.streamable_http").exception("Error in post_writer")
    (line,) = lines_of(stream)
    assert SECRET not in json.dumps(line)
    assert f"for url '{SHOWN}'" in line["exception"]


def test_a_line_that_cannot_be_formatted_is_cut_too() -> None:
    stream = io.StringIO()
    with logged_to(stream):
        logging.getLogger("a.library").warning(f"fetching {WITH_SECRETS} for %s and %s", "one argument only")
    (line,) = lines_of(stream)
    assert line["event"] == "log_line_unwritable"
    assert line["message"] == f"fetching {SHOWN} for %s and %s"


def test_a_tap_is_handed_the_line_cut() -> None:
    """What a host reads of our lines (front/host_logs.py) is cut as stderr's is."""
    stream = io.StringIO()
    tapped: list[Mapping[str, Any]] = []
    tap = tapped.append
    add_log_tap(tap)
    with logged_to(stream):
        structlog.get_logger("meta_agent.test").info("jwks_unavailable", error=f"{WITH_SECRETS} answered HTTP 500")
    assert [event["error"] for event in tapped if event.get("event") == "jwks_unavailable"] == [
        f"{SHOWN} answered HTTP 500"
    ]


@pytest.mark.parametrize(
    "text",
    [
        "a question? yes # and a note, alice@example.com",
        "GET /mcp HTTP/1.1 from 127.0.0.1:50000",
        "ratio 3:2 at 12:30:45",
        "https://api.example:8443/v1/hook and http://[::1]:8765/mcp",
    ],
)
def test_a_line_without_a_query_or_user_info_is_written_as_it_came(text: str) -> None:
    stream = io.StringIO()
    with logged_to(stream):
        structlog.get_logger("meta_agent.test").info("said", text=text)
        logging.getLogger("a.library").info(text)
    ours, theirs = lines_of(stream)
    assert (ours["text"], theirs["event"]) == (text, text)
