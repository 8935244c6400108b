"""URLs as a log line may show them (shared/urls.py): scheme, host, port and path; never a query, user info or
fragment; and, in a longer text, nothing but the URLs touched."""

from __future__ import annotations

import time

import pytest

from meta_agent.shared.urls import loggable_url, loggable_urls

LONG_INPUT_SECONDS = 5  # far above the milliseconds a linear scan takes; a quadratic one takes hours


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://host.example/mcp", "https://host.example/mcp"),
        ("https://host.example:8443/a/b/", "https://host.example:8443/a/b/"),
        ("http://127.0.0.1:9/mcp?token=k", "http://127.0.0.1:9/mcp"),
        ("https://u:pw@host.example/mcp", "https://host.example/mcp"),
        ("https://user@host.example", "https://host.example"),
        ("https://a@b:pw@host.example:1/p?q#f", "https://host.example:1/p"),  # the user info ends at the last @
        ("https://host.example/p#access_token=k", "https://host.example/p"),
        ("https://host.example?token=k", "https://host.example"),
        ("https://host.example/users/@me?k=1", "https://host.example/users/@me"),  # an @ of the path is the path's
        ("https://host.example/?next=https://u:pw@other/", "https://host.example/"),
        ("http://[::1]:8765/mcp?access_token=k", "http://[::1]:8765/mcp"),
        ("postgresql://meta:pw@db:5432/meta?sslmode=require&password=pw", "postgresql://db:5432/meta"),
        ("/mcp?access_token=k", "/mcp"),  # a request target
        ("/ui/callback?code=c&state=s", "/ui/callback"),
        ("/health", "/health"),
        ("collector:4317", "collector:4317"),  # gRPC's host:port
        ("127.0.0.1:50000", "127.0.0.1:50000"),  # a client's address
        ("", ""),
    ],
)
def test_a_url_keeps_its_scheme_host_port_and_path_only(url: str, shown: str) -> None:
    assert loggable_url(url) == shown


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("cannot reach http://u:pw@h:9/mcp?token=k: ConnectError", "cannot reach http://h:9/mcp: ConnectError"),
        ("HTTP Request: POST http://h/mcp?token=k 200", "HTTP Request: POST http://h/mcp 200"),
        ("Invalid URL 'https://h/p?key=k'", "Invalid URL 'https://h/p'"),  # the closing quote is the text's
        ("(see https://h/a?b=c).", "(see https://h/a)."),
        ("<https://h/a#frag>", "<https://h/a>"),
        ('{"url": "https://u:pw@h/?k=v", "n": 1}', '{"url": "https://h/", "n": 1}'),
        ("two: http://a/?x=1 and https://b/c?y=2", "two: http://a/ and https://b/c"),
        ("Redirect to https://h/x?code=c not followed", "Redirect to https://h/x not followed"),
        ("plain http://h/mcp and https://h:8443/a/", "plain http://h/mcp and https://h:8443/a/"),
    ],
)
def test_the_urls_in_a_text_are_cut_and_only_they(text: str, shown: str) -> None:
    assert loggable_urls(text) == shown


@pytest.mark.parametrize(
    "text",
    [
        "a question? yes # and a note",
        "mail alice@example.com about /mcp?access_token=x",  # no scheme: a request target is cut where it is logged
        "ratio 3:2, path a/b, time 12:30:45",
        "",
        "naïve – ünïcode ✓ :// alone",
    ],
)
def test_a_text_without_urls_is_left_as_it_is(text: str) -> None:
    assert loggable_urls(text) == text


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("a." * 500_000 + "://", "a." * 500_000 + "://"),  # a scheme-shaped run as long as a line may be
        ("x://?" * 250_000, "x://"),  # one URL whose query holds the rest
        ("x:// " * 250_000, "x:// " * 250_000),  # many URLs, each only a start
        ("http://h/" + "." * 1_000_000 + "x?k", "http://h/" + "." * 1_000_000 + "x"),  # punctuation that closes nothing
    ],
    ids=["long-scheme", "one-long-query", "many-starts", "long-punctuation"],
)
def test_a_long_hostile_text_takes_linear_time(text: str, shown: str) -> None:
    started = time.monotonic()
    assert loggable_urls(text) == shown
    assert time.monotonic() - started < LONG_INPUT_SECONDS
