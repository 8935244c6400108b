"""MCP Apps on our server, through the SDK's real Client in both eras: what a host that declares the extension
`io.modelcontextprotocol/ui` sees and one that does not, the run view's reads of a host's own call, approvals answered
in the view (alone, and racing the host's own question), and the tool selector's choices shaping the next run —
with the fault fixture child and the real openai SDK against a fake model."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import anyio
import mcp.types as t
import pytest
from conftest import fault_entry, openai_env
from fake_llm import FakeLLM, openai_reply
from host_doubles import User, accept, call_ids, tool_message
from mcp import Client
from mcp.client.extension import advertise
from mcp.server.apps import APP_MIME_TYPE, EXTENSION_ID
from mcp.shared.exceptions import MCPError

from meta_agent.config.settings import Settings
from meta_agent.front.server import build_server

pytestmark = pytest.mark.anyio
MODES = {"2026-07-28": "auto", "2025-11-25": "legacy"}
UI = [advertise(EXTENSION_ID, {"mimeTypes": [APP_MIME_TYPE]})]
APP_TOOLS = {"app_run", "app_answer", "app_toolbox", "app_set_tool", "app_set_mode", "app_start", "app_runs"}


def settings(tmp_path: Path) -> Settings:
    """A database of the test's own: what a subject chooses in the tool selector outlives the server."""
    return Settings(model="openai:fake-model", conversations_db=tmp_path / "state.sqlite3")


async def app(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def run_of(client: Client, **find: Any) -> dict[str, Any]:
    """Poll `app_run` as the view does until the run is done; every event read, in order."""
    events: list[dict[str, Any]] = []
    after = 0
    with anyio.fail_after(30):
        while True:
            page = await app(client, "app_run", after=after, **find)
            events += page["events"]
            after = page["cursor"]
            if page["run"] is not None and page["run"]["status"] == "done" and not page["more"]:
                return {**page, "events": events}
            if not page["more"]:
                await anyio.sleep(0.05)


@pytest.mark.parametrize("era", list(MODES))
async def test_a_host_without_the_extension_sees_todays_tools(era: str, llm: FakeLLM, tmp_path: Path) -> None:
    server = build_server(settings(tmp_path), {}, openai_env(llm))
    async with Client(server, mode=MODES[era]) as plain:
        tools = {tool.name: tool for tool in (await plain.list_tools()).tools}
        resources = [str(resource.uri) for resource in (await plain.list_resources()).resources]
        refused = [await refusal(plain.call_tool(name, {})) for name in ("app_toolbox", "tools", "no_such_tool")]
    assert set(tools) == {"ask", "plan", "agent"}
    assert all(tool.meta is None or "ui" not in tool.meta for tool in tools.values())
    assert not any(uri.startswith("ui://") for uri in resources)
    # an app's tool is a tool that does not exist, to this host: the same protocol error
    assert refused == [
        (t.INVALID_PARAMS, f"Unknown tool: {name}", None) for name in ("app_toolbox", "tools", "no_such_tool")
    ]


async def refusal(call: Awaitable[Any]) -> tuple[int, str, Any]:
    """The JSON-RPC error `call` is answered with: its code, message and data."""
    with pytest.raises(MCPError) as refused:
        await call
    return refused.value.error.code, refused.value.error.message, refused.value.error.data


@pytest.mark.parametrize("era", list(MODES))
async def test_a_host_with_the_extension_sees_the_views(era: str, llm: FakeLLM, tmp_path: Path) -> None:
    server = build_server(settings(tmp_path), {}, openai_env(llm))
    async with Client(server, mode=MODES[era], extensions=UI) as host:
        tools = {tool.name: tool for tool in (await host.list_tools()).tools}
        views = {uri: await host.read_resource(uri) for uri in ("ui://meta-agent/run", "ui://meta-agent/tools")}
    assert set(tools) == {"ask", "plan", "agent", "tools", *APP_TOOLS}
    for name in ("ask", "plan", "agent"):
        assert tools[name].meta == {"ui": {"resourceUri": "ui://meta-agent/run"}}
    assert tools["tools"].meta == {"ui": {"resourceUri": "ui://meta-agent/tools"}}
    assert tools["tools"].input_schema.get("required", []) == []
    for name in APP_TOOLS:
        assert tools[name].meta is not None and tools[name].meta["ui"]["visibility"] == ["app"]
    for read in views.values():
        (content,) = read.contents
        assert isinstance(content, t.TextResourceContents) and content.mime_type == APP_MIME_TYPE
        assert len(content.text.encode()) <= 1_000_000
        # self-contained: nothing reached over the network, not even a link
        assert not re.search(r"https?://|[\"'(=]\s*//[A-Za-z0-9]", content.text)


@pytest.mark.parametrize("era", list(MODES))
async def test_the_run_view_reads_the_hosts_own_call(era: str, llm: FakeLLM, tmp_path: Path) -> None:
    server = build_server(settings(tmp_path), {"f": fault_entry()}, openai_env(llm))
    llm.reply(openai_reply("Let me look.", ("c1", "f__echo", {"text": "<img src=x onerror=alert(1)>\x1b[31m"})))
    llm.reply(openai_reply("It said so."))
    async with Client(server, mode=MODES[era], extensions=UI) as host:
        with call_ids(host, "host-call-7"):
            result = await host.call_tool("agent", {"task": "echo something"})
        nothing_yet = await app(host, "app_run", request_id="host-call-8")
        seen = await run_of(host, request_id="host-call-7", task="echo something")
    assert nothing_yet["run"] is None and nothing_yet["events"] == []
    assert seen["run"]["run_id"] == result.structured_content["run_id"]  # type: ignore[index]
    kinds = [event["kind"] for event in seen["events"]]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    assert [event["seq"] for event in seen["events"]] == sorted({event["seq"] for event in seen["events"]})
    call = next(event for event in seen["events"] if event["kind"] == "tool_call")
    assert call["name"] == "f.echo" and call["arguments"] == {"text": "<img src=x onerror=alert(1)>␛[31m"}
    done = next(event for event in seen["events"] if event["kind"] == "tool_result")
    assert done["ok"] and done["text"] == "<img src=x onerror=alert(1)>␛[31m"
    reply = next(event for event in seen["events"] if event["kind"] == "model_reply")
    assert reply["text"] == "Let me look." and reply["tool_calls"] == ["f.echo"]
    assert seen["result"]["answer"] == "It said so." and seen["result"]["stop_reason"] == "final"
    assert seen["events"][-1]["usage"]["tool_calls"] == 1


async def test_another_subjects_run_is_unknown_to_the_view(llm: FakeLLM, tmp_path: Path) -> None:
    server = build_server(settings(tmp_path), {}, openai_env(llm))
    llm.reply(openai_reply("hi"))
    async with Client(server, extensions=UI) as host:
        run_id = (await host.call_tool("ask", {"prompt": "hi"})).structured_content["run_id"]  # type: ignore[index]
        refused = await host.call_tool("app_run", {"run_id": "01KNOSUCHRUN0000000000000"})
        mine = await app(host, "app_run", run_id=run_id)
    assert refused.is_error and refused.content[0].text == "unknown run '01KNOSUCHRUN0000000000000'"  # type: ignore[union-attr]
    assert mine["run"]["status"] == "done"


async def run_of_now(host: Client, run_id: str) -> list[dict[str, Any]]:
    return list((await app(host, "app_run", run_id=run_id))["events"])


async def pending_of(host: Client, request_id: str) -> tuple[str, dict[str, Any]]:
    """Wait, as the view polls, for the run of the call `request_id` to ask: its id and the question."""
    with anyio.fail_after(30):
        while True:
            page = await app(host, "app_run", request_id=request_id)
            if page["pending"]:
                return page["run"]["run_id"], page["pending"][0]
            await anyio.sleep(0.05)


@pytest.mark.parametrize("era", list(MODES))
@pytest.mark.parametrize("decision", ["approve", "deny"])
async def test_a_host_that_cannot_elicit_gets_its_approvals_in_the_view(
    era: str, decision: str, llm: FakeLLM, tmp_path: Path
) -> None:
    server = build_server(settings(tmp_path), {"f": fault_entry()}, openai_env(llm))
    llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": "/tmp/a"})))
    llm.reply(openai_reply("finished"))
    results: list[t.CallToolResult] = []
    async with Client(server, mode=MODES[era], extensions=UI) as host, anyio.create_task_group() as tg:

        async def call() -> None:
            with call_ids(host, "call-1"):
                results.append(await host.call_tool("agent", {"task": "delete /tmp/a"}))

        tg.start_soon(call)
        run_id, question = await pending_of(host, "call-1")
        assert question["name"] == "f.delete_file" and question["arguments"] == {"path": "/tmp/a"}
        answer = await app(host, "app_answer", run_id=run_id, key=question["key"], decision=decision)
        again = await host.call_tool("app_answer", {"run_id": run_id, "key": question["key"], "decision": "approve"})
    assert answer["ok"] and answer["allowed"] is (decision == "approve")
    assert not again.is_error and again.structured_content["ok"] is False  # type: ignore[index]  # the first one won
    (result,) = results
    steps = result.structured_content["steps"]  # type: ignore[index]
    assert steps[0]["tool_calls"][0]["ok"] is (decision == "approve")
    told = tool_message(llm)
    assert told == "deleted /tmp/a" if decision == "approve" else told.startswith("[error] the user did not allow")


async def test_the_view_answers_before_the_hosts_own_question_and_wins(llm: FakeLLM, tmp_path: Path) -> None:
    """A 2025-11-25 host that can elicit and shows the view: both are asked; the view's answer wins and the host's
    question is withdrawn (its elicitation cancelled)."""
    server = build_server(settings(tmp_path), {"f": fault_entry()}, openai_env(llm))
    llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": "/tmp/a"})))
    llm.reply(openai_reply("finished"))
    asked = anyio.Event()
    withdrawn = anyio.Event()

    async def never_answers(_ctx: Any, _params: Any) -> t.ElicitResult:
        asked.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            withdrawn.set()
            raise
        raise AssertionError("unreachable")

    results: list[t.CallToolResult] = []
    async with (
        Client(server, mode="legacy", extensions=UI, elicitation_callback=never_answers) as host,
        anyio.create_task_group() as tg,
    ):

        async def call() -> None:
            with call_ids(host, 41):
                results.append(await host.call_tool("agent", {"task": "delete /tmp/a"}))

        tg.start_soon(call)
        run_id, question = await pending_of(host, 41)  # type: ignore[arg-type]
        with anyio.fail_after(30):
            await asked.wait()
        await app(host, "app_answer", run_id=run_id, key=question["key"], decision="approve")
        with anyio.fail_after(30):
            await withdrawn.wait()
    assert results[0].structured_content["steps"][0]["tool_calls"][0]["ok"] is True  # type: ignore[index]
    assert tool_message(llm) == "deleted /tmp/a"


async def test_the_hosts_own_answer_wins_when_it_comes_first(llm: FakeLLM, tmp_path: Path) -> None:
    server = build_server(settings(tmp_path), {"f": fault_entry()}, openai_env(llm))
    llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": "/tmp/a"})))
    llm.reply(openai_reply("finished"))
    async with Client(server, mode="legacy", extensions=UI, elicitation_callback=User(accept("deny"))) as host:
        with call_ids(host, "c-9"):
            result = await host.call_tool("agent", {"task": "delete /tmp/a"})
        run = await app(host, "app_run", request_id="c-9")
    assert result.structured_content["steps"][0]["tool_calls"][0]["ok"] is False  # type: ignore[index]
    assert run["pending"] == []  # the view's question went with the host's answer
    answered = [event for event in run["events"] if event["kind"] == "approval_answered"]
    assert [event["answer"] for event in answered] == ["denied"]


@pytest.mark.parametrize("era", list(MODES))
async def test_the_tool_selector_shapes_the_next_run(era: str, llm: FakeLLM, tmp_path: Path) -> None:
    entry = fault_entry(trust={"append": "never"})
    server = build_server(settings(tmp_path), {"f": entry}, openai_env(llm))
    async with Client(server, mode=MODES[era], extensions=UI) as host:
        toolbox = await app(host, "tools")
        (f,) = toolbox["servers"]
        names = {tool["name"]: tool for tool in f["tools"]}
        assert names["f.echo"]["read_only"] and names["f.echo"]["trust"] == "always"
        assert names["f.append"]["locked"] and names["f.append"]["trust"] == "never"
        assert {tool["name"] for tool in toolbox["internal"]} >= {"read_result", "find_tools"}
        off = await app(host, "app_set_tool", name="f.echo", enabled=False)
        trusted = await app(host, "app_set_tool", name="f.delete_file", trust="always")
        lifted = await host.call_tool("app_set_tool", {"name": "f.append", "trust": "always"})
        unknown = await host.call_tool("app_set_tool", {"name": "f.nothing", "enabled": False})
        mode = await app(host, "app_set_mode", mode="plan")
        llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": "/tmp/b"})))
        llm.reply(openai_reply("done"))
        result = await host.call_tool("agent", {"task": "delete /tmp/b"})  # no elicitation, no view answer: trusted
        again = await app(host, "app_toolbox")
    assert not off["enabled"] and trusted["trust"] == "always"
    assert lifted.is_error and "stays never" in lifted.content[0].text  # type: ignore[union-attr]
    assert unknown.is_error and unknown.content[0].text == "name: no tool 'f.nothing' in the toolbox"  # type: ignore[union-attr]
    assert mode == {"mode": "plan"} and again["mode"] == "plan"
    offered = {tool["function"]["name"] for tool in llm.requests[0].body["tools"]}
    assert "f__echo" not in offered and "f__delete_file" in offered and "f__append" in offered
    assert result.structured_content["steps"][0]["tool_calls"][0]["ok"] is True  # type: ignore[index]
    assert tool_message(llm) == "deleted /tmp/b"


async def test_a_run_started_in_the_view_asks_there(llm: FakeLLM, tmp_path: Path) -> None:
    server = build_server(settings(tmp_path), {"f": fault_entry()}, openai_env(llm))
    llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": "/tmp/c"})))
    llm.reply(openai_reply("gone"))
    async with Client(server, extensions=UI) as host:
        started = await app(host, "app_start", task="delete /tmp/c", mode="agent")
        run_id = started["run_id"]
        with anyio.fail_after(30):
            while not (page := await app(host, "app_run", run_id=run_id) if await _exists(host, run_id) else None) or (
                not page["pending"]
            ):
                await anyio.sleep(0.05)
        await app(host, "app_answer", run_id=run_id, key=page["pending"][0]["key"], decision="approve")
        seen = await run_of(host, run_id=run_id)
        listed = await app(host, "app_runs")
    assert seen["result"]["answer"] == "gone"
    assert listed["runs"][0]["run_id"] == run_id and listed["runs"][0]["task"] == "delete /tmp/c"
    assert json.loads(json.dumps(seen["events"]))[-1]["kind"] == "run_finished"


async def _exists(host: Client, run_id: str) -> bool:
    """Whether the run started in the background is in the index yet."""
    result = await host.call_tool("app_run", {"run_id": run_id})
    return not result.is_error


async def test_a_parked_call_answered_in_the_view_goes_on_past_the_late_answer(llm: FakeLLM, tmp_path: Path) -> None:
    """A 2026-07-28 host that can be asked and shows the view: the question is a round of the call and a row of the
    view; the view answers first, so the round's question is withdrawn, and the host's late answer to it only goes
    on with the call (it is not taken: the view allowed, the host denied)."""
    server = build_server(settings(tmp_path), {"f": fault_entry()}, openai_env(llm))
    llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": "/tmp/d"})))
    llm.reply(openai_reply("finished"))
    viewed = anyio.Event()
    results: list[t.CallToolResult] = []

    asked: list[str] = []

    async def late(_ctx: Any, params: Any) -> t.ElicitResult:
        asked.append(params.message)
        with anyio.fail_after(30):
            await viewed.wait()
        return accept("deny")

    async with (
        Client(server, extensions=UI, elicitation_callback=late) as host,
        anyio.create_task_group() as tg,
    ):

        async def call() -> None:
            with call_ids(host, "parked-1"):
                results.append(await host.call_tool("agent", {"task": "delete /tmp/d"}))

        tg.start_soon(call)
        run_id, question = await pending_of(host, "parked-1")
        answer = await app(host, "app_answer", run_id=run_id, key=question["key"], decision="approve")
        with anyio.fail_after(30):  # the run goes on with the view's answer before the host's comes
            while not any(event["kind"] == "tool_result" for event in (await run_of_now(host, run_id))):
                await anyio.sleep(0.05)
        viewed.set()
    assert answer["ok"] and len(asked) == 1  # the host was asked too, and answered late
    (result,) = results
    assert not result.is_error, result.content
    assert result.structured_content["steps"][0]["tool_calls"][0]["ok"] is True  # type: ignore[index]
    assert tool_message(llm) == "deleted /tmp/d"


@pytest.mark.parametrize(
    ("settings_given", "shown"),
    [({}, True), ({"mimeTypes": [APP_MIME_TYPE, "text/html"]}, True), ({"mimeTypes": ["text/html"]}, False)],
    ids=["no-mime-types", "ours-listed", "ours-not-listed"],
)
async def test_the_extension_is_taken_as_declared(
    settings_given: dict[str, Any], shown: bool, llm: FakeLLM, tmp_path: Path
) -> None:
    server = build_server(settings(tmp_path), {}, openai_env(llm))
    async with Client(server, extensions=[advertise(EXTENSION_ID, settings_given)]) as host:
        names = {tool.name for tool in (await host.list_tools()).tools}
    assert ("tools" in names) is shown and ("app_run" in names) is shown


async def test_a_view_without_the_calls_id_finds_the_running_run_by_its_task(llm: FakeLLM, tmp_path: Path) -> None:
    """Some hosts do not tell their app the id of the call (`toolInfo.id` is optional): the view then asks for the
    caller's newest running run of the task the tool input gave."""
    server = build_server(settings(tmp_path), {"f": fault_entry()}, openai_env(llm))
    llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": "/tmp/t"})))
    llm.reply(openai_reply("finished"))
    async with Client(server, extensions=UI) as host, anyio.create_task_group() as tg:
        tg.start_soon(host.call_tool, "agent", {"task": "delete /tmp/t please"})
        with anyio.fail_after(30):
            while (found := await app(host, "app_run", task="delete /tmp/t"))["run"] is None or not found["pending"]:
                await anyio.sleep(0.05)
        other = await app(host, "app_run", task="something else")
        await app(host, "app_answer", run_id=found["run"]["run_id"], key=found["pending"][0]["key"], decision="deny")
    assert found["run"]["task"] == "delete /tmp/t please" and other["run"] is None
