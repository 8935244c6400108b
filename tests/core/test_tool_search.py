"""Tool search: the index on its own, then find_tools through the MCP front in both protocol eras, with a real child
of many tools (fixtures/many_tools.py) and the real openai SDK talking to the fake model endpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import ProgressLog, openai_env
from conftest import named_tool as spec
from fake_llm import FakeLLM, Seen, openai_reply
from many_tools import tools
from mcp import Client

from meta_agent.config.servers import ServerEntry, ToolFilter, load_servers, parse_servers
from meta_agent.config.settings import Settings
from meta_agent.core.tool_search import AUTO_THRESHOLD, ToolIndex, search_on, tokenize
from meta_agent.errors import ConfigError
from meta_agent.front.server import build_server

pytestmark = pytest.mark.anyio
MANY = Path(__file__).parents[1] / "fixtures" / "many_tools.py"
ERAS = ["2026-07-28", "legacy"]


def many(count: int = 60, **extra: Any) -> ServerEntry:
    """The many-tools child, trusted (none of these tests is about approval)."""
    return ServerEntry(command=sys.executable, args=(str(MANY), "--count", str(count)), trust={"*": "always"}, **extra)


def offered(seen: Seen) -> list[str]:
    """The tool names a model request carried."""
    return [tool["function"]["name"] for tool in seen.body.get("tools", [])]


def children_in(seen: Seen) -> list[str]:
    """The child tools a model request carried (internal tools have no server prefix)."""
    return [name for name in offered(seen) if "__" in name]


def tool_messages(seen: Seen) -> list[str]:
    return [str(message["content"]) for message in seen.body["messages"] if message["role"] == "tool"]


def test_words_split_at_case_and_separators_and_meet_across_suffixes() -> None:
    assert tokenize("get_file_contents") == tokenize("get-file.content") == ["get", "file", "content"]
    assert tokenize("getFileContents") == ["getfilecontent", "get", "file", "content"]  # the whole word too
    assert tokenize("HTTPServer listIssues") == ["httpserver", "http", "server", "listissu", "list", "issu"]
    assert tokenize("GitHub") == ["github", "git", "hub"]
    assert tokenize("open https://news.example.com/a?b=1 now") == tokenize("open www.news.example.com now")
    assert tokenize("open www.news.example.com now") == ["open", "url", "now"]  # an address is "a URL"
    assert tokenize("created") == tokenize("creating") == tokenize("creates") == tokenize("create")
    assert tokenize("the status of a repository") == ["status", "repository"]


def test_the_index_ranks_by_name_description_parameters_and_server() -> None:
    tools = [
        spec("github.create_issue", "Create a new issue in a GitHub repository.", {"title": {"type": "string"}}),
        spec("github.list_issues", "List issues in a GitHub repository.", {"state": {"type": "string"}}),
        spec("fs.read_file", "Read the complete contents of a file.", {"path": {"description": "Where it is"}}),
        spec("pg.execute_sql", "Run a statement.", {"sql": {"type": "string", "description": "SQL to run"}}),
        spec("time.get_current_time", "Current time in a timezone.", {"timezone": {"type": "string"}}),
    ]
    index = ToolIndex(tools)
    assert index.search("open a new issue", 1)[0].name == "github.create_issue"
    assert index.search("list the issues", 1)[0].name == "github.list_issues"
    assert index.search("sql query", 1)[0].name == "pg.execute_sql"  # a parameter's description
    assert index.search("readFile", 1)[0].name == "fs.read_file"  # camelCase meets snake_case
    assert index.search("pg", 1)[0].name == "pg.execute_sql"  # the server's name
    assert [found.name for found in index.search("github issues", 5)] == ["github.list_issues", "github.create_issue"]
    assert index.search("fetch https://example.com/time", 1) == []  # the address's words are not the query's
    assert index.search("weather in paris") == []
    assert len(index.search("a", 3)) == 0 and len(ToolIndex([]).search("anything")) == 0


def test_a_query_that_names_a_server_puts_its_tools_ahead() -> None:
    tools = [
        spec("git.git_log", "Shows the commit logs of the repository.", {"max_count": {"type": "integer"}}),
        spec("github.list_commits", "Get list of commits of a branch.", {"sha": {"type": "string"}}),
        spec("notion.API-query", "Query a database.", {"filter": {"type": "object"}}),
    ]
    index = ToolIndex(tools)
    assert [found.name for found in index.search("the commit log", 2)] == ["git.git_log", "github.list_commits"]
    assert [found.name for found in index.search("the commits on GitHub", 2)] == [
        "github.list_commits",
        "git.git_log",
    ]
    assert [found.name for found in index.search("query the notion database", 1)] == ["notion.API-query"]


def test_search_turns_on_above_the_threshold_never_in_ask_mode() -> None:
    assert not search_on("auto", "agent", AUTO_THRESHOLD)
    assert search_on("auto", "agent", AUTO_THRESHOLD + 1) and search_on("auto", "plan", AUTO_THRESHOLD + 1)
    assert search_on("on", "agent", 1) and not search_on("off", "agent", 500)
    assert not search_on("on", "ask", 500)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (["m.get_*"], "pin pattern 'm.get_*' has a dot: write the server's own tool name ('get_*')"),
        ("get_*", "expected a list of glob patterns over the server's own tool names"),
        (["bad pattern"], "bad pattern 'bad pattern'"),
    ],
)
def test_pins_are_globs_over_the_servers_own_names(value: Any, error: str) -> None:
    text = json.dumps({"mcpServers": {"m": {"command": "x", "pin": value}}})
    with pytest.raises(ConfigError, match=r"mcpServers\.m\.pin") as caught:
        parse_servers(text, "servers.json", {})
    assert error in str(caught.value)
    assert parse_servers(json.dumps({"mcpServers": {"m": {"command": "x", "pin": ["get_*"]}}}), "s", {})["m"].pin == (
        "get_*",
    )


@pytest.mark.parametrize("era", ERAS)
async def test_the_model_finds_a_tool_it_was_not_shown_and_calls_it(era: str, llm: FakeLLM) -> None:
    servers = {"m": many(200, pin=("get_invoice",))}
    server = build_server(Settings(model="openai:fake-model"), servers, openai_env(llm))
    llm.reply(openai_reply(None, ("c1", "find_tools", {"query": "export currency rates"})))
    llm.reply(openai_reply(None, ("c2", "m__export_currency_rate", {"currency_rate_id": "EUR"})))
    llm.reply(openai_reply("exported"))
    progress = ProgressLog()
    async with Client(server, mode="legacy" if era == "legacy" else "auto") as client:
        result = await client.call_tool("agent", {"task": "export the EUR rate"}, progress_callback=progress)
    assert not result.is_error and result.structured_content is not None
    first, second, third = llm.requests
    # find_tools, the internal tools (describe_image, read_result) and the pins: no other child tool
    assert offered(first)[0] == "find_tools" and children_in(first) == ["m__get_invoice"]
    [found] = tool_messages(second)
    assert found.splitlines()[0].startswith(
        "m.export_currency_rate (call it m__export_currency_rate): Export currency rate records in the back office. "
        "Parameters: currency_rate_id: string, note?: string"
    )
    assert children_in(second)[0] == "m__get_invoice" and "m__export_currency_rate" in children_in(second)
    assert len(children_in(second)) <= 1 + 5 and set(offered(first)) < set(offered(second))
    assert offered(third) == offered(second)
    assert json.loads(tool_messages(third)[-1]) == {
        "called": "export_currency_rate",
        "arguments": {"currency_rate_id": "EUR"},
    }
    steps = result.structured_content["steps"]
    assert [(call["name"], call["ok"]) for step in steps for call in step["tool_calls"]] == [
        ("find_tools", True),
        ("m.export_currency_rate", True),
    ]
    assert 'step 1 · call find_tools {"query": "export currency rates"}' in progress.messages
    assert any(message.startswith("step 1 · find_tools ok") for message in progress.messages)


async def test_search_never_reveals_a_tool_the_run_cannot_use(llm: FakeLLM) -> None:
    """Not a tool tools.deny filters out, nor one the caller's selector leaves out, nor in plan mode one that may
    change things; and calling one by its name is refused as unknown."""
    servers = {"m": many(tools=ToolFilter(deny=["delete_*"]))}
    server = build_server(Settings(model="openai:fake-model", tool_search="on"), servers, openai_env(llm))
    async with Client(server) as client:
        llm.reply(openai_reply(None, ("c1", "find_tools", {"query": "delete invoice", "limit": 20})))
        llm.reply(openai_reply(None, ("c2", "m__delete_invoice", {"invoice_id": "1"})))
        llm.reply(openai_reply("none"))
        await client.call_tool("agent", {"task": "delete invoice 1"})
        found, refused = tool_messages(llm.requests[2])
        assert "m.list_invoice" in found and "delete" not in found
        assert refused == "[error] unknown tool 'm__delete_invoice'; find the tool you need with find_tools"

        llm.requests.clear()
        llm.reply(openai_reply(None, ("c1", "find_tools", {"query": "customer"})))
        llm.reply(openai_reply("none"))
        await client.call_tool("agent", {"task": "t", "tools": ["m.*_invoice"]})
        assert tool_messages(llm.requests[1]) == ["no tool matches 'customer'; try other words"]

        llm.requests.clear()
        llm.reply(
            openai_reply(None, ("c1", "find_tools", {"query": "create update archive list invoice", "limit": 20}))
        )
        llm.reply(openai_reply("1. look"))
        await client.call_tool("plan", {"task": "t"})
        lines = tool_messages(llm.requests[1])[0].splitlines()
        verbs = {line.split()[0].removeprefix("m.").split("_")[0] for line in lines if line.startswith("m.")}
        assert verbs == {"list", "get", "search", "count"}  # the read-only ones only


@pytest.mark.parametrize(
    ("count", "setting", "searching"),
    [(AUTO_THRESHOLD, "auto", False), (AUTO_THRESHOLD + 1, "auto", True), (60, "off", False), (3, "on", True)],
)
async def test_auto_searches_above_the_threshold_and_the_setting_overrides_it(
    count: int, setting: Any, searching: bool, llm: FakeLLM
) -> None:
    settings = Settings(model="openai:fake-model", tool_search=setting)
    server = build_server(settings, {"m": many(count)}, openai_env(llm))
    async with Client(server) as client:
        llm.reply(openai_reply("fine"))
        await client.call_tool("agent", {"task": "t", "tools": ["m.*"]})
    names = offered(llm.requests[0])
    assert names == (["find_tools"] if searching else [f"m__{tool}" for tool in _names(count)])


def _names(count: int) -> list[str]:
    return [tool["name"] for tool in tools(count)]


async def test_ask_mode_never_searches(llm: FakeLLM) -> None:
    server = build_server(Settings(model="openai:fake-model", tool_search="on"), {"m": many()}, openai_env(llm))
    async with Client(server) as client:
        llm.reply(openai_reply("hi"))
        await client.call_tool("ask", {"prompt": "hi"})
    assert "find_tools" not in offered(llm.requests[0])


@pytest.mark.parametrize("era", ERAS)
async def test_a_conversation_keeps_the_tools_found_and_a_known_tool_called_unshown_runs(
    era: str, llm: FakeLLM
) -> None:
    server = build_server(Settings(model="openai:fake-model"), {"m": many()}, openai_env(llm))
    async with Client(server, mode="legacy" if era == "legacy" else "auto") as client:
        llm.reply(openai_reply(None, ("c1", "find_tools", {"query": "ticket", "limit": 2})))
        llm.reply(openai_reply("found"))
        first = await client.call_tool("agent", {"task": "find ticket tools"})
        assert first.structured_content is not None
        shown = offered(llm.requests[1])
        assert len(children_in(llm.requests[1])) == 2 and all("ticket" in name for name in children_in(llm.requests[1]))

        llm.requests.clear()
        # the model calls a selected tool it was never shown (it knows the server's names): it runs, and is shown
        llm.reply(openai_reply(None, ("c2", "m__restore_ticket", {"ticket_id": "7"})))
        llm.reply(openai_reply("restored"))
        conversation = first.structured_content["conversation_id"]
        second = await client.call_tool("agent", {"task": "restore ticket 7", "conversation_id": conversation})
        assert not second.is_error
        assert offered(llm.requests[0]) == shown
        assert json.loads(tool_messages(llm.requests[1])[-1])["called"] == "restore_ticket"
        assert set(offered(llm.requests[1])) == {*shown, "m__restore_ticket"}


def test_meta_agent_run_searches_a_200_tool_child_and_the_trace_tells_it(tmp_path: Path, llm: FakeLLM) -> None:
    """`meta-agent run` in its own process, search on by `auto` (200 tools), the trace read back."""
    config = tmp_path / "servers.json"
    entry = {"command": sys.executable, "args": [str(MANY), "--count", "200"], "trust": {"*": "always"}}
    config.write_text(json.dumps({"mcpServers": {"m": entry}}))
    llm.reply(openai_reply(None, ("c1", "find_tools", {"query": "archive old shipments"})))
    llm.reply(openai_reply(None, ("c2", "m__archive_shipment", {"shipment_id": "S1"})))
    llm.reply(openai_reply("archived"))
    environ = openai_env(llm, model="openai:fake-model", base=os.environ, META_AGENT_TRACE_DIR=str(tmp_path / "t"))
    command = [sys.executable, "-m", "meta_agent", "run", "archive shipment S1", "--config", str(config), "--json"]
    done = subprocess.run(command, env=environ, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["answer"] == "archived"
    assert [call["name"] for step in out["steps"] for call in step["tool_calls"]] == [
        "find_tools",
        "m.archive_shipment",
    ]
    assert 'step 1 · call find_tools {"query": "archive old shipments"}' in done.stderr
    assert children_in(llm.requests[0]) == [] and "m__archive_shipment" in children_in(llm.requests[1])
    trace = (tmp_path / "t" / f"{out['run_id']}.jsonl").read_text().splitlines()
    finished = [json.loads(line) for line in trace if '"tool_call_finished"' in line]
    assert [record["name"] for record in finished] == ["find_tools", "m.archive_shipment"]
    assert "m.archive_shipment" in finished[0]["result"][0]["text"]


async def test_the_index_follows_the_toolbox_across_a_reload(tmp_path: Path, llm: FakeLLM) -> None:
    """40 tools, then servers.json edited to 200: a search of the next run finds a tool only the new child has."""
    path = tmp_path / "servers.json"

    def write(count: int) -> None:
        entry = {"command": sys.executable, "args": [str(MANY), "--count", str(count)], "trust": {"*": "always"}}
        path.write_text(json.dumps({"mcpServers": {"m": entry}}))

    write(40)  # invoices, customers, shipments and tickets: no payroll runs
    settings = Settings(model="openai:fake-model")
    server = build_server(settings, load_servers(path, os.environ), openai_env(llm), config_file=path)
    search = openai_reply(None, ("c1", "find_tools", {"query": "restore a payroll run"}))
    async with Client(server) as client:
        llm.reply(search)
        llm.reply(openai_reply("none"))
        await client.call_tool("agent", {"task": "restore payroll run 7"})
        assert "m.restore_payroll_run" not in tool_messages(llm.requests[1])[0]
        assert server.engine is not None
        engine = server.engine
        grown = anyio.Event()
        engine.toolbox.on_change(lambda: "m.restore_payroll_run" in engine.toolbox().by_name and grown.set())
        write(200)
        engine.toolbox.request_reload()
        with anyio.fail_after(30):
            await grown.wait()
        llm.requests.clear()
        llm.reply(search)
        llm.reply(openai_reply("none"))
        await client.call_tool("agent", {"task": "restore payroll run 7"})
    assert tool_messages(llm.requests[1])[0].startswith("m.restore_payroll_run ")
