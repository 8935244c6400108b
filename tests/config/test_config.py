"""servers.json loading and settings: every bad input is one line naming the file, the JSON path and the problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from meta_agent.config.servers import ServerEntry, load_servers, parse_servers
from meta_agent.config.settings import load_settings
from meta_agent.errors import ConfigError
from meta_agent.shared.json_errors import invalid_json
from meta_agent.shared.validation import problem

pytestmark = pytest.mark.quick

ENV = {"HOME": "/home/u", "TOKEN": "s3cret", "EMPTY": ""}


def servers(**entries: object) -> str:
    return json.dumps({"mcpServers": entries})


BAD = [
    # (id, text, what the one line must say)
    # JSON's slips in words, at the line and column of the slip (a trailing comma's own, not the bracket's after it)
    ("not-json", '{"mcpServers": {', "servers.json:1:17: invalid JSON (line 1, column 17): the text ends before"),
    (
        "trailing-comma",
        '{"mcpServers": {"a": {"command": "x",}}}',
        "servers.json:1:37: invalid JSON (line 1, column 37): a trailing comma after the last item",
    ),
    (
        "trailing-comma-own-line",
        '{\n  "mcpServers": {\n    "a": {"command": "x"},\n  }\n}',
        "servers.json:3:26: invalid JSON (line 3, column 26): a trailing comma after the last item (JSON allows none)",
    ),
    ("trailing-comma-list", servers(a={"command": "x"})[:-3] + ', "args": ["a",]}}}', "a trailing comma"),
    (
        "second-line",
        '{\n  "mcpServers": {\n    "a" {}\n  }\n}',
        "servers.json:3:9: invalid JSON (line 3, column 9): a ':'",
    ),
    (
        "single-quotes",
        "{'mcpServers': {}}",
        "servers.json:1:2: invalid JSON (line 1, column 2): single quotes: JSON wants",
    ),
    ("bare-key", "{mcpServers: {}}", "a key without quotes: JSON wants every key in double quotes"),
    (
        "comment",
        '{"mcpServers": {} // the servers\n}',
        "servers.json:1:19: invalid JSON (line 1, column 19): a comment",
    ),
    ("missing-comma", servers(a={"command": "x"}, b={"command": "y"}).replace("}, ", "} "), "a ',' is missing"),
    ("windows-path", '{"mcpServers": {"a": {"command": "C:\\Tools\\x"}}}', "write a backslash as \\\\"),
    ("empty-file", " \n", "servers.json:2:1: invalid JSON (line 2, column 1): the file is empty"),
    ("extra-bracket", servers(a={"command": "x"}) + "}", "more text after the end of the JSON"),
    ("bad-value", servers(a={"command": "x"}).replace('"x"', "tru"), "expected a value (a string in double quotes,"),
    ("line-break-in-string", '{"mcpServers": {"a": {"command": "x\ny"}}}', "a line break or tab inside a string"),
    ("unclosed-string", '{"mcpServers": {"a": {"command": "x}}}', "a string is not closed"),
    ("top-array", "[]", 'expected a JSON object with "mcpServers", got a list'),
    ("top-string", '"x"', "got a string"),
    ("no-mcpServers", "{}", "mcpServers: required key is missing"),
    ("misspelt-top", '{"mcpServer": {}}', "mcpServer: unknown key 'mcpServer' (did you mean 'mcpServers'?)"),
    ("servers-not-object", '{"mcpServers": []}', "mcpServers: expected an object, got []"),
    ("entry-not-object", servers(a="x"), 'mcpServers.a: expected an object, got "x"'),
    ("unknown-key", servers(a={"comand": "x"}), "mcpServers.a.comand: unknown key 'comand' (did you mean 'command'?)"),
    ("unknown-key-no-match", servers(a={"command": "x", "zzz": 1}), "mcpServers.a.zzz: unknown key 'zzz' (known keys:"),
    ("both", servers(a={"command": "x", "url": "http://h/mcp"}), "mcpServers.a: has both `command` (stdio) and `url`"),
    ("neither", servers(a={"env": {}}), "mcpServers.a: needs `command` (a stdio server) or `url`"),
    ("empty-command", servers(a={"command": " "}), "mcpServers.a.command: must not be empty"),
    ("bad-name-dot", servers(**{"a.b": {"command": "x"}}), "mcpServers[\"a.b\"]: bad server name 'a.b'"),
    ("bad-name-space", servers(**{"my server": {"command": "x"}}), "bad server name 'my server'"),
    ("unset-var", servers(a={"command": "${NOPE}"}), "mcpServers.a.command: environment variable NOPE is not set"),
    ("unset-var-in-env", servers(a={"command": "x", "env": {"K": "${NOPE}"}}), "mcpServers.a.env.K: environment"),
    ("unset-var-in-header", servers(a={"url": "http://h/mcp", "headers": {"A": "Bearer ${NOPE}"}}), "headers.A"),
    ("malformed-var", servers(a={"command": "x", "args": ["${"]}), "mcpServers.a.args[0]: malformed variable"),
    ("args-not-list", servers(a={"command": "x", "args": "--flag"}), "mcpServers.a.args: expected a list of strings"),
    ("arg-not-string", servers(a={"command": "x", "args": [1]}), "mcpServers.a.args[0]: expected a string, got 1"),
    (
        "env-value-null",
        servers(a={"command": "x", "env": {"K": None}}),
        "mcpServers.a.env.K: expected a string, got null",
    ),
    ("env-not-object", servers(a={"command": "x", "env": ["K=V"]}), "mcpServers.a.env: expected an object"),
    (
        "timeout-string",
        servers(a={"command": "x", "timeout": "60"}),
        'mcpServers.a.timeout: expected a number, got "60"',
    ),
    ("timeout-zero", servers(a={"command": "x", "timeout": 0}), "mcpServers.a.timeout: input should be greater than 0"),
    ("timeout-bool", servers(a={"command": "x", "timeout": True}), "mcpServers.a.timeout: expected a number, got true"),
    (
        "disabled-string",
        servers(a={"command": "x", "disabled": "yes"}),
        "mcpServers.a.disabled: expected true or false",
    ),
    (
        "trust-level",
        servers(a={"command": "x", "trust": {"*": "maybe"}}),
        "mcpServers.a.trust[\"*\"]: input should be 'never'",
    ),
    ("trust-pattern", servers(a={"command": "x", "trust": {"a b": "ask"}}), "bad pattern 'a b'"),
    ("tools-list", servers(a={"command": "x", "tools": ["a"]}), "mcpServers.a.tools: expected an object"),
    (
        "tools-key",
        servers(a={"command": "x", "tools": {"alow": []}}),
        "tools.alow: unknown key 'alow' (did you mean 'allow'?)",
    ),
    (
        "tools-glob",
        servers(a={"command": "x", "tools": {"deny": ["x y"]}}),
        "mcpServers.a.tools.deny: bad pattern 'x y'",
    ),
    ("tools-bracket", servers(a={"command": "x", "tools": {"deny": ["[ab"]}}), "unbalanced [ ]"),
    ("url-scheme", servers(a={"url": "ftp://h/mcp"}), "mcpServers.a: `url` must start with http:// or https://"),
    (  # quoted without the user info and query that may be its key
        "url-scheme-with-a-key",
        servers(a={"url": "ftp://u:pw@h/mcp?key=k"}),
        "`url` must start with http:// or https://, got 'ftp://h/mcp'",
    ),
    (
        "url-with-args",
        servers(a={"url": "http://h/mcp", "args": ["x"]}),
        "`args`, `env` and `cwd` are for stdio servers",
    ),
    ("command-with-headers", servers(a={"command": "x", "headers": {"A": "b"}}), "`headers` are for HTTP servers"),
    ("type-sse", servers(a={"url": "http://h/sse", "type": "sse"}), "mcpServers.a.type: input should be 'stdio'"),
    ("type-mismatch", servers(a={"command": "x", "type": "http"}), 'has `command` but `"type": "http"`'),
    (
        "trust-dotted",
        servers(a={"command": "x", "trust": {"a.run": "ask"}}),
        "has a dot: write the server's own tool name ('run')",
    ),
    ("newline-in-name", servers(**{"a\nb": {"command": "x"}}), "mcpServers[\"a\\nb\"]: bad server name 'a\\nb'"),
    ("newline-in-key", servers(a={"com\nmand": "x"}), "mcpServers.a[\"com\\nmand\"]: unknown key 'com\\nmand'"),
    (
        "newline-in-env-key",
        servers(a={"command": "x", "env": {"A\nB": 1}}),
        'mcpServers.a.env["A\\nB"]: expected a string',
    ),
    ("empty-after-expansion", servers(a={"command": "${UNSET:-}"}), "mcpServers.a.command: must not be empty"),
    (
        "bad-url-after-expansion",
        servers(a={"url": "${HOME}"}),
        "`url` must start with http:// or https://, got '/home/u'",
    ),
    (
        "huge-number",
        '{"mcpServers": {"a": {"command": "x", "timeout": ' + "9" * 5000 + "}}}",
        "servers.json: invalid JSON: Exceeds",
    ),
    ("deep-nesting", '{"mcpServers": ' + "[" * 100_000 + "]" * 100_000 + "}", "servers.json: invalid JSON"),
    ("duplicate-server", '{"mcpServers": {"a": {"command": "x"}, "a": {"command": "y"}}}', "key 'a' appears twice"),
    # a long value is quoted back cut, with one ellipsis character
    ("long-value", servers(a={"command": "x", "timeout": "9" * 60}), f'timeout: expected a number, got "{"9" * 38}…'),
    # every problem, an unknown key first, as it may explain the others; past four, how many more
    (
        "two-problems",
        servers(a={"command": "x", "timeout": "x", "zzz": 1}),
        "a.zzz: unknown key 'zzz' (known keys: type, command, args, env, cwd, url, headers, disabled, tools, trust,"
        ' timeout, pin); mcpServers.a.timeout: expected a number, got "x"',
    ),
    (
        "each-problem",
        servers(a={"command": "x", "timeout": "x", "disabled": "y"}),
        'mcpServers.a.disabled: expected true or false, got "y"; mcpServers.a.timeout: expected a number, got "x"',
    ),
    (  # the missing key the did-you-mean names is the same slip, said once; the other unknown key is said too
        "misspelt-and-another",
        '{"servers": {}, "foo": 1}',
        "servers.json: servers: unknown key 'servers' (did you mean 'mcpServers'?); foo: unknown key 'foo' (known keys:"
        " mcpServers, webhooks)",
    ),
    (
        "how-many-more",
        servers(a={"command": "x", "timeout": "x", "disabled": "y", "pin": 1, "tools": 2, "trust": 3}),
        'mcpServers.a.timeout: expected a number, got "x" (and 1 more)',
    ),
]


@pytest.mark.parametrize(("text", "expected"), [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_a_bad_config_is_one_clear_line(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_servers(text, "servers.json", ENV)
    message = str(caught.value)
    assert message.startswith("servers.json")
    assert expected in message
    assert "\n" not in message


def test_a_byte_order_mark_is_read_past_in_servers_json_and_named_in_a_file_we_write() -> None:
    """Some Windows editors start a UTF-8 file with a BOM: servers.json, written by hand, is read past it; the trust
    file, which meta-agent writes, is refused with the slip named, not the decoder's words."""
    assert parse_servers("\ufeff" + servers(a={"command": "x"}), "servers.json", ENV)["a"].command == "x"
    with pytest.raises(json.JSONDecodeError) as caught:
        json.loads("\ufeff{}")
    assert invalid_json("servers.trust.json", caught.value) == (
        "servers.trust.json:1:1: invalid JSON (line 1, column 1): the file starts with a byte order mark (BOM): "
        "save it as UTF-8 without BOM"
    )


def test_there_are_at_least_twenty_bad_configs() -> None:
    assert len(BAD) >= 20


def test_a_full_config_loads() -> None:
    text = servers(
        time={"command": "mcp-server-time"},
        pg={
            "command": "${HOME}/bin/postgres-mcp",
            "args": ["--access-mode=${MODE:-restricted}", "--token=${TOKEN}"],
            "env": {"DATABASE_URI": "${DB:-postgresql://localhost/db}", "BLANK": "${EMPTY}"},
            "trust": {"execute_sql": "ask", "*": "always"},
            "timeout": 12.5,
        },
        docs={"type": "http", "url": "http://127.0.0.1:9000/mcp", "headers": {"Authorization": "Bearer ${X:-}"}},
        web={"url": "https://example.test/mcp", "tools": {"allow": ["get_*"], "deny": ["get_secret"]}},
    )
    loaded = parse_servers(text, "servers.json", ENV)
    assert list(loaded) == ["time", "pg", "docs", "web"]
    pg = loaded["pg"]
    assert pg.command == "/home/u/bin/postgres-mcp"
    assert pg.args == ("--access-mode=restricted", "--token=s3cret")
    assert pg.env == {"DATABASE_URI": "postgresql://localhost/db", "BLANK": ""}
    assert pg.trust == {"execute_sql": "ask", "*": "always"}
    assert (pg.timeout, pg.transport) == (12.5, "stdio")
    assert loaded["time"].timeout == 60
    assert loaded["docs"].headers == {"Authorization": "Bearer "}
    assert loaded["docs"].transport == "http"
    assert loaded["web"].tools.allow == ("get_*",)


def test_variables_are_expanded_before_checking() -> None:
    loaded = parse_servers(servers(docs={"url": "${DOCS_URL}"}), "servers.json", {"DOCS_URL": "http://127.0.0.1:9/mcp"})
    assert loaded["docs"].url == "http://127.0.0.1:9/mcp"


def test_a_byte_order_mark_is_accepted() -> None:
    assert list(parse_servers("\ufeff" + servers(a={"command": "x"}), "servers.json", {})) == ["a"]


def test_a_disabled_server_needs_no_variables() -> None:
    loaded = parse_servers(servers(off={"command": "${NOT_SET}", "disabled": True}), "servers.json", {})
    assert loaded["off"].disabled
    assert loaded["off"].command == "${NOT_SET}"


def test_load_names_the_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.json: no such file \(pass --config PATH or set META_AGENT_CONFIG\)"):
        load_servers(tmp_path / "nope.json", {})


def test_load_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    path.write_text(servers(a={"command": "x"}))
    assert load_servers(path, {}) == {"a": ServerEntry(command="x")}


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("META_AGENT_MAX_STEPS", "many", "META_AGENT_MAX_STEPS: input should be a valid integer"),
        ("META_AGENT_MAX_STEPS", "0", 'META_AGENT_MAX_STEPS: input should be greater than or equal to 1, got "0"'),
        ("META_AGENT_LOG_LEVEL", "loud", "META_AGENT_LOG_LEVEL: input should be 'debug'"),
    ],
)
def test_a_bad_setting_names_its_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, expected: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert expected in str(caught.value)


@pytest.mark.parametrize(
    ("value", "enabled"),
    [(None, ["image_gen"]), ("", []), ("image_gen", ["image_gen"]), (" image_gen , ", ["image_gen"])],
)
def test_internal_tools_setting(monkeypatch: pytest.MonkeyPatch, value: str | None, enabled: list[str]) -> None:
    if value is None:
        monkeypatch.delenv("META_AGENT_INTERNAL_TOOLS", raising=False)
    else:
        monkeypatch.setenv("META_AGENT_INTERNAL_TOOLS", value)
    assert load_settings().enabled_internal_tools(["image_gen"]) == enabled


def test_an_unknown_internal_tool_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("META_AGENT_INTERNAL_TOOLS", "image_gn")
    with pytest.raises(ConfigError, match="unknown internal tool 'image_gn' \\(did you mean 'image_gen'\\?\\)"):
        load_settings().enabled_internal_tools(["image_gen"])


def test_a_refusal_that_says_what_it_got_in_words_shows_the_value_once() -> None:
    with pytest.raises(ValidationError) as caught:
        TypeAdapter(int).validate_python(2.5)
    assert (
        problem(caught.value.errors()[0])
        == "input should be a valid integer, got a number with a fractional part (2.5)"
    )


# -- webhooks ------------------------------------------------------------------------------------------------------


def webhooks(**entries: object) -> str:
    return json.dumps({"webhooks": entries})


HOOK = {"url": "https://hooks.example/x"}

BAD_WEBHOOKS = [
    ("url-scheme", webhooks(n={"url": "ftp://hooks.example/x"}), "webhooks.n: `url` must be an http:// or https://"),
    (
        "url-scheme-with-a-key",
        webhooks(n={"url": "ftp://u:pw@hooks.example/x?key=k"}),
        "URL with a host, got 'ftp://hooks.example/x'",
    ),
    (
        "url-no-host",
        webhooks(n={"url": "https:///x"}),
        "webhooks.n: `url` must be an http:// or https:// URL with a host",
    ),
    ("url-port", webhooks(n={"url": "https://h:99999/x"}), "webhooks.n: `url` has a bad port"),
    ("url-missing", webhooks(n={"method": "GET"}), "webhooks.n.url: required key is missing"),
    ("url-unset-var", webhooks(n={"url": "${NOPE}"}), "webhooks.n.url: environment variable NOPE is not set"),
    (
        "unknown-key",
        webhooks(n={**HOOK, "metod": "GET"}),
        "webhooks.n.metod: unknown key 'metod' (did you mean 'method'?)",
    ),
    ("misspelt-top", '{"webhook": {}, "mcpServers": {}}', "webhook: unknown key 'webhook' (did you mean 'webhooks'?)"),
    ("method", webhooks(n={**HOOK, "method": "HEAD"}), "webhooks.n.method: input should be 'GET', 'POST'"),
    (
        "trust-level",
        webhooks(n={**HOOK, "trust": "maybe"}),
        "webhooks.n.trust: input should be 'never', 'ask' or 'always'",
    ),
    ("trust-map", webhooks(n={**HOOK, "trust": {"*": "ask"}}), "webhooks.n.trust: input should be 'never'"),
    ("timeout-zero", webhooks(n={**HOOK, "timeout": 0}), "webhooks.n.timeout: input should be greater than 0"),
    (
        "parameters-schema",
        webhooks(n={**HOOK, "parameters": {"type": "object", "properties": {"a": {"type": "strin"}}}}),
        "webhooks.n.parameters: not a valid JSON Schema: 'strin' is not valid under any of the given schemas "
        "(at properties.a.type)",
    ),
    (
        "parameters-not-object",
        webhooks(n={**HOOK, "parameters": {"type": "string"}}),
        'webhooks.n.parameters: must be the JSON Schema of an object (with "type": "object")',
    ),
    ("parameters-list", webhooks(n={**HOOK, "parameters": []}), "webhooks.n.parameters: expected an object, got []"),
    ("description-empty", webhooks(n={**HOOK, "description": " "}), "webhooks.n.description: must not be empty"),
    ("header-name", webhooks(n={**HOOK, "headers": {"A B": "x"}}), "webhooks.n.headers: bad header name 'A B'"),
    (
        "header-value-unset-var",
        webhooks(n={**HOOK, "headers": {"Authorization": "Bearer ${NOPE}"}}),
        "webhooks.n.headers.Authorization: environment variable NOPE is not set",
    ),
    ("bad-name", webhooks(**{"a.b": HOOK}), "webhooks[\"a.b\"]: bad webhook name 'a.b'"),
    ("not-object", '{"webhooks": []}', "webhooks: expected an object, got []"),
    (
        "clash",
        json.dumps({"mcpServers": {"webhooks": {"command": "x"}}, "webhooks": {"n": HOOK}}),
        "mcpServers.webhooks: a server named 'webhooks' beside the webhooks map: both would name their tools "
        "webhooks.*; rename the server",
    ),
]


@pytest.mark.parametrize(("text", "expected"), [case[1:] for case in BAD_WEBHOOKS], ids=[c[0] for c in BAD_WEBHOOKS])
def test_a_bad_webhook_is_one_clear_line(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_servers(text, "servers.json", ENV)
    message = str(caught.value)
    assert message.startswith("servers.json: ")
    assert expected in message
    assert "\n" not in message


def test_a_header_value_that_cannot_be_sent_is_refused_without_quoting_it() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_servers(webhooks(n={**HOOK, "headers": {"X-Key": "${TOKEN}\nInjected: 1"}}), "servers.json", ENV)
    assert "the value of header 'X-Key' must be printable ASCII on one line" in str(caught.value)
    assert ENV["TOKEN"] not in str(caught.value)


def test_webhooks_load_beside_servers_or_alone() -> None:
    text = json.dumps(
        {
            "mcpServers": {"time": {"command": "mcp-server-time"}},
            "webhooks": {
                "notify": {
                    "url": "https://hooks.example/x?token=${TOKEN}",
                    "method": "post",
                    "headers": {"Authorization": "Bearer ${TOKEN}"},
                    "description": "Post a message",
                    "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
                    "timeout": 30,
                    "trust": "always",
                },
                "off": {"url": "${NOT_SET}", "disabled": True},
            },
        }
    )
    loaded = parse_servers(text, "servers.json", ENV)
    assert list(loaded) == ["time"]  # the servers, as before; the webhooks beside them
    notify = loaded.webhooks["notify"]
    assert (notify.url, notify.method, notify.headers) == (
        "https://hooks.example/x?token=s3cret",
        "POST",
        {"Authorization": "Bearer s3cret"},
    )
    assert (notify.timeout, notify.trust, notify.description) == (30, "always", "Post a message")
    assert loaded.webhooks["off"].url == "${NOT_SET}"  # disabled: not expanded
    alone = parse_servers(webhooks(n=HOOK), "servers.json", {})
    assert dict(alone) == {} and list(alone.webhooks) == ["n"]
    assert parse_servers(servers(a={"command": "x"}), "servers.json", {}).webhooks == {}


def test_a_misspelt_setting_is_named_not_ignored_in_silence() -> None:
    from meta_agent.config.settings import unknown_settings

    environ = {"META_AGENT_MODL": "openai:x", "META_AGENT_MODEL": "openai:y", "META_AGENT_ZZZ": "1", "PATH": "/bin"}
    assert unknown_settings(environ) == [
        "META_AGENT_MODL is no setting and is ignored (did you mean META_AGENT_MODEL?)",
        "META_AGENT_ZZZ is no setting and is ignored",
    ]
