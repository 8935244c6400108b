"""Asking the host's user before a tool that changes things runs, in both protocol eras, with the SDK's real Client
and its elicitation callback, the fixture child's destructive tool, and the real openai SDK against a fake model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any

import anyio
import httpx2
import mcp.types as t
import pytest
import structlog
from conftest import ProgressLog, ServerLog, everything_entry, fault_entry, free_port, openai_env
from fake_llm import FakeLLM, openai_reply
from host_doubles import User, accept, tool_message
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.server import MCPServer
from mcp.server.connection import Connection
from mcp.server.mcpserver import Context

from meta_agent.config.settings import Settings
from meta_agent.front.approvals import asking, parked
from meta_agent.front.server import build_server

pytestmark = pytest.mark.anyio
MODES = {"2026-07-28": "auto", "2025-11-25": "legacy"}
HTTP_TOKEN = "approvals-token"


@pytest.fixture
async def servers_and_llm(llm: FakeLLM) -> AsyncIterator[tuple[Any, FakeLLM]]:
    server = build_server(Settings(model="openai:fake-model"), {"f": fault_entry()}, openai_env(llm))
    yield server, llm


@pytest.mark.parametrize("era", list(MODES))
@pytest.mark.parametrize(
    ("answer", "ran", "said"),
    [
        (accept("allow_once"), True, "f.delete_file allowed: allowed once"),
        (accept("allow_session"), True, "f.delete_file allowed: allowed for this session"),
        (accept("deny"), False, "f.delete_file not allowed: denied"),
        (t.ElicitResult(action="decline"), False, "f.delete_file not allowed: declined"),
        (t.ElicitResult(action="cancel"), False, "f.delete_file not allowed: cancelled"),
    ],
    ids=["once", "session", "deny", "decline", "cancel"],
)
async def test_the_user_is_asked(era: str, answer: t.ElicitResult, ran: bool, said: str, llm: FakeLLM) -> None:
    server = build_server(Settings(model="openai:fake-model"), {"f": fault_entry()}, openai_env(llm))
    user = User(answer)
    llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": "/tmp/a"})))
    llm.reply(openai_reply("finished"))
    progress = ProgressLog()
    async with Client(server, mode=MODES[era], elicitation_callback=user) as client:
        result = await client.call_tool("agent", {"task": "delete /tmp/a"}, progress_callback=progress)
    assert not result.is_error
    assert user.asked == ['meta-agent wants to run f.delete_file (destructive) with {"path": "/tmp/a"}. Allow it?']
    told = tool_message(llm)
    if ran:
        assert told == "deleted /tmp/a"
    else:
        assert told.startswith(f"[error] the user did not allow f.delete_file ({said.split(': ')[1]})")
    assert result.structured_content and result.structured_content["steps"][0]["tool_calls"][0]["ok"] is ran
    # the question and the answer are in the progress (the audit trail), in order
    assert 'step 1 · asking the user to allow f.delete_file {"path": "/tmp/a"}' in progress.messages
    assert f"step 1 · {said}" in progress.messages
    assert progress.messages[-1] == "done · final (2 model calls, 1 tool call)"


@pytest.mark.parametrize("era", list(MODES))
async def test_a_caller_that_cannot_be_asked_gets_a_refusal_not_a_hang(era: str, llm: FakeLLM) -> None:
    server = build_server(Settings(model="openai:fake-model"), {"f": fault_entry()}, openai_env(llm))
    llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": "/tmp/a"})))
    llm.reply(openai_reply("could not"))
    async with Client(server, mode=MODES[era]) as client:  # declares no elicitation
        with anyio.fail_after(30):
            result = await client.call_tool("agent", {"task": "delete"})
    assert result.content[0].text == "could not"  # type: ignore[union-attr]
    told = tool_message(llm)
    assert told.startswith("[error] f.delete_file needs the user's approval and this caller cannot be asked;")
    assert '"trust": {"delete_file": ...} of server "f" in servers.json' in told


async def test_allow_for_the_session_lasts_the_session_and_no_longer(llm: FakeLLM) -> None:
    server = build_server(Settings(model="openai:fake-model"), {"f": fault_entry()}, openai_env(llm))
    user = User(accept("allow_session"), accept("allow_once"))
    for path in ("/a", "/b", "/c"):
        llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": path})))
        llm.reply(openai_reply(f"deleted {path}"))
    async with Client(server, mode="legacy", elicitation_callback=user) as client:
        await client.call_tool("agent", {"task": "delete /a"})
        second = ProgressLog()
        await client.call_tool("agent", {"task": "delete /b"}, progress_callback=second)
        assert len(user.asked) == 1  # the same session: not asked again...
        assert "step 1 · f.delete_file allowed: already allowed for this session" in second.messages
    async with Client(server, mode="legacy", elicitation_callback=user) as client:
        await client.call_tool("agent", {"task": "delete /c"})
    assert len(user.asked) == 2  # ...but a new session is asked again
    assert tool_message(llm) == "deleted /c"


async def test_the_session_connection_is_the_sdks_one_object_per_session() -> None:
    """`session_connection` is meta-agent's one read of an SDK internal (`ServerSession._connection`): the SDK's
    `Connection`, the same for every request of a session, another for the next session. When an SDK release moves
    or reshapes it, this fails, loudly."""
    probe = MCPServer("probe")
    seen: list[Connection] = []

    @probe.tool()
    async def which(ctx: Context) -> str:
        seen.append(asking.session_connection(ctx))
        return "ok"

    for _session in range(2):
        async with Client(probe, mode="legacy") as client:
            for _request in range(2):
                result = await client.call_tool("which", {})
                assert not result.is_error, result.content
    assert all(isinstance(connection, Connection) for connection in seen)
    assert seen[0] is seen[1] and seen[2] is seen[3] and seen[0] is not seen[2]


def test_the_session_connection_is_never_guessed() -> None:
    """Where the SDK keeps no `Connection`, the error names what to update; no silent stand-in (a per-request
    object would make "allow for this session" last one request)."""
    ctx: Any = SimpleNamespace(session=SimpleNamespace())  # a session of an SDK that moved it
    with pytest.raises(TypeError, match="connection_of needs updating"):
        asking.session_connection(ctx)


async def test_on_2026_07_28_allow_for_the_session_lasts_the_connection(llm: FakeLLM) -> None:
    """No MCP sessions in this era; off HTTP the connection is the user's session (stdio: the process): "allow for
    this session" holds for the rest of the run and for the connection's later calls, and a new connection asks."""
    server = build_server(Settings(model="openai:fake-model"), {"f": fault_entry()}, openai_env(llm))
    user = User(accept("allow_session"), accept("deny"))
    llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": "/a"})))
    llm.reply(openai_reply(None, ("c2", "f__delete_file", {"path": "/b"})))
    llm.reply(openai_reply("both gone"))
    llm.reply(openai_reply(None, ("c3", "f__delete_file", {"path": "/c"})))
    llm.reply(openai_reply("gone too"))
    llm.reply(openai_reply(None, ("c4", "f__delete_file", {"path": "/d"})))
    llm.reply(openai_reply("kept /d"))
    async with Client(server, elicitation_callback=user) as client:
        assert client.protocol_version == "2026-07-28"
        progress = ProgressLog()
        first = await client.call_tool("agent", {"task": "delete /a and /b"}, progress_callback=progress)
        assert first.content[0].text == "both gone"  # type: ignore[union-attr]
        assert len(user.asked) == 1
        assert "this tool for the rest of this session" in user.choices[0]
        steps = first.structured_content["steps"]  # type: ignore[index]
        assert [s["tool_calls"][0]["ok"] for s in steps[:2]] == [True, True]
        later = ProgressLog()
        second = await client.call_tool("agent", {"task": "delete /c"}, progress_callback=later)
        assert second.content[0].text == "gone too"  # type: ignore[union-attr]
        assert len(user.asked) == 1  # a later call of the same connection: not asked again
        assert "step 1 · f.delete_file allowed: already allowed for this session" in later.messages
    async with Client(server, elicitation_callback=user) as client:
        third = await client.call_tool("agent", {"task": "delete /d"})
        assert third.content[0].text == "kept /d"  # type: ignore[union-attr]
    assert len(user.asked) == 2  # ...but another connection is asked
    assert tool_message(llm).startswith("[error] the user did not allow f.delete_file (denied)")
    # progress flowed in every round of the first call, from start to done, its counter going up all the way
    assert progress.messages[0].startswith("start · run ")
    assert progress.messages[-1] == "done · final (3 model calls, 2 tool calls)"
    counts = [p for p, _, _ in progress.seen]
    assert counts == sorted(set(counts)) and counts[0] == 1


async def test_a_parked_run_nobody_resumes_is_reaped_with_its_child_calls(
    llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parked, "PARK_TIMEOUT", 0.5)
    reaped = anyio.Event()
    hang_cancelled = anyio.Event()

    def watch(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
        if event.get("event") == "parked_run_reaped":
            reaped.set()
        if event.get("event") == "child_stderr" and "hang cancelled" in event.get("line", ""):
            hang_cancelled.set()
        raise structlog.DropEvent

    server = build_server(Settings(model="openai:fake-model"), {"f": fault_entry()}, openai_env(llm))
    # one step: a read-only call that hangs in the child, and a destructive one that needs an answer
    llm.reply(openai_reply(None, ("c1", "f__hang", {}), ("c2", "f__delete_file", {"path": "/a"})))
    old = structlog.get_config()
    structlog.configure(processors=[watch])
    try:
        async with Client(server, elicitation_callback=User()) as client:
            # Drive the rounds by hand and never come back with an answer.
            first = await client.session.call_tool("agent", {"task": "t"}, allow_input_required=True)
            assert isinstance(first, t.InputRequiredResult)
            assert list(first.input_requests) == ["approval"]
            with anyio.fail_after(20):
                await reaped.wait()
                await hang_cancelled.wait()
            late = await client.session.call_tool(
                "agent",
                {"task": "t"},
                allow_input_required=True,
                input_responses={"approval": accept("allow_once")},
                request_state=first.request_state,
            )
            assert isinstance(late, t.CallToolResult) and late.is_error
            assert "no longer pending" in late.content[0].text  # type: ignore[union-attr]
    finally:
        structlog.configure(**old)


def serve_on_stdio(llm: FakeLLM, tmp_path: Any) -> StdioServerParameters:
    """`meta-agent serve` on stdio as a subprocess, with the fault server as child `f` and the fake model."""
    config = tmp_path / "servers.json"
    fault = fault_entry()
    config.write_text(json.dumps({"mcpServers": {"f": {"command": fault.command, "args": list(fault.args)}}}))
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "meta_agent", "serve", "--config", str(config)],
        env=openai_env(llm, model="openai:fake-model", base=os.environ),
    )


async def test_approval_over_a_stdio_subprocess(llm: FakeLLM, tmp_path: Any) -> None:
    params = serve_on_stdio(llm, tmp_path)
    llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": "/x"})))
    llm.reply(openai_reply("done"))
    user = User(accept("allow_once"))
    async with Client(params, mode="legacy", elicitation_callback=user) as client:
        result = await client.call_tool("agent", {"task": "delete /x"})
    assert result.content[0].text == "done"  # type: ignore[union-attr]
    assert len(user.asked) == 1 and tool_message(llm) == "deleted /x"


async def test_on_2026_07_28_over_stdio_allow_for_the_session_lasts_the_process(llm: FakeLLM, tmp_path: Any) -> None:
    """A stdio server serves one user's session: a later call of the same process is not asked again."""
    params = serve_on_stdio(llm, tmp_path)
    for path in ("/x", "/y"):
        llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": path})))
        llm.reply(openai_reply(f"done with {path}"))
    user = User(accept("allow_session"))
    async with Client(params, elicitation_callback=user) as client:
        assert client.protocol_version == "2026-07-28"
        await client.call_tool("agent", {"task": "delete /x"})
        second = await client.call_tool("agent", {"task": "delete /y"})
    assert second.content[0].text == "done with /y"  # type: ignore[union-attr]
    assert len(user.asked) == 1 and tool_message(llm) == "deleted /y"
    assert "for the rest of this session" in user.choices[0]


@pytest.mark.parametrize(
    ("answer", "child_saw"),
    [(t.ElicitResult(action="accept", content={"name": "Ada"}), '"name": "Ada"'), (None, '"action": "decline"')],
    ids=["forwarded", "declined"],
)
async def test_a_child_that_asks_is_answered_by_our_caller(
    answer: t.ElicitResult | None, child_saw: str, llm: FakeLLM
) -> None:
    """server-everything's trigger-elicitation-request asks *us* mid-call; our 2025-11-25 caller answers it, and a
    caller that cannot be asked gets the child a decline."""
    server = build_server(
        Settings(model="openai:fake-model"),
        {"every": everything_entry(trust={"trigger-elicitation-request": "always"})},
        openai_env(llm),
    )
    asked: list[str] = []

    async def user(_ctx: Any, params: Any) -> t.ElicitResult:
        asked.append(params.message)
        assert answer is not None
        return answer

    llm.reply(openai_reply(None, ("c1", "every__trigger-elicitation-request", {})))
    llm.reply(openai_reply("ok"))
    options = {"elicitation_callback": user} if answer is not None else {}
    async with Client(server, mode="legacy", **options) as client:
        result = await client.call_tool("agent", {"task": "ask me"})
    assert not result.is_error
    told = tool_message(llm)
    assert child_saw in told
    assert asked == ([] if answer is None else ["Please provide inputs for the following fields:"])


@pytest.mark.parametrize(
    ("answer", "child_said"),
    [(t.ElicitResult(action="accept", content={"sure": True}), "sure=True"), (None, "no answer (decline)")],
    ids=["forwarded", "declined"],
)
async def test_a_2026_child_asking_through_input_required_is_answered_the_same_way(
    answer: t.ElicitResult | None, child_said: str, llm: FakeLLM
) -> None:
    """The fixture child speaks 2026-07-28: its question arrives as an input-required round, which our client turns
    into the same callback, and it is forwarded to our caller."""
    server = build_server(Settings(model="openai:fake-model"), {"f": fault_entry()}, openai_env(llm))
    llm.reply(openai_reply(None, ("c1", "f__confirm", {})))
    llm.reply(openai_reply("ok"))
    asked: list[str] = []

    async def user(_ctx: Any, params: Any) -> t.ElicitResult:
        asked.append(params.message)
        assert answer is not None
        return answer

    options = {"elicitation_callback": user} if answer is not None else {}
    async with Client(server, mode="legacy", **options) as client:
        await client.call_tool("agent", {"task": "confirm"})
    assert tool_message(llm) == child_said
    assert asked == ([] if answer is None else ["Are you sure?"])


async def test_replayed_and_stale_answers_approve_nothing(llm: FakeLLM) -> None:
    """Rounds driven by hand: an answer counts once, for the question it was given for, and never for the next."""
    server = build_server(Settings(model="openai:fake-model"), {"f": fault_entry()}, openai_env(llm))
    calls = (("c1", "f__delete_file", {"path": "/a"}), ("c2", "f__delete_file", {"path": "/b"}))
    llm.reply(openai_reply(None, *calls))
    llm.reply(openai_reply("done"))
    async with Client(server, elicitation_callback=User()) as client:

        async def round_(state: str | None = None, decision: str | None = None) -> Any:
            responses = {"approval": accept(decision)} if decision else None
            return await client.session.call_tool(
                "agent", {"task": "t"}, allow_input_required=True, input_responses=responses, request_state=state
            )

        first = await round_()
        assert isinstance(first, t.InputRequiredResult)
        assert "/a" in first.input_requests["approval"].params.message  # type: ignore[union-attr]
        second = await round_(first.request_state, "allow_once")
        assert isinstance(second, t.InputRequiredResult)
        assert "/b" in second.input_requests["approval"].params.message  # type: ignore[union-attr]
        replay = await round_(first.request_state, "allow_once")  # the answer about /a, sent again
        assert isinstance(replay, t.CallToolResult) and replay.is_error
        assert "answered already" in replay.content[0].text  # type: ignore[union-attr]
        last = await round_(second.request_state, "deny")
        assert isinstance(last, t.CallToolResult) and not last.is_error
    results = [m["content"] for m in llm.requests[-1].body["messages"] if m["role"] == "tool"]
    assert results == [
        "deleted /a",
        "[error] the user did not allow f.delete_file (denied); do without it, or ask the user",
    ]


async def test_at_most_max_parked_runs_wait_and_the_next_is_refused_in_one_line(llm: FakeLLM, tmp_path: Any) -> None:
    """META_AGENT_MAX_PARKED=2: two runs park; the third call's run ends at once, its call answered with one line
    naming the setting, its trace ended; once a parked run is answered, the next call parks again."""
    settings = Settings(model="openai:fake-model", max_parked=2, trace_dir=tmp_path, conversations_db=tmp_path / "c")
    server = build_server(settings, {"f": fault_entry()}, openai_env(llm))
    for n in range(5):
        llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": f"/{n}"})), match=f"[{n}]")
    llm.reply(openai_reply("done with 0"), match="[0]")
    async with Client(server, elicitation_callback=User()) as client:

        async def round_(n: int, state: str | None = None, decision: str | None = None) -> Any:
            responses = {"approval": accept(decision)} if decision else None
            return await client.session.call_tool(
                "agent", {"task": f"[{n}]"}, allow_input_required=True, input_responses=responses, request_state=state
            )

        first, second = await round_(0), await round_(1)
        assert isinstance(first, t.InputRequiredResult) and isinstance(second, t.InputRequiredResult)
        third = await round_(2)
        assert isinstance(third, t.CallToolResult) and third.is_error
        assert third.content[0].text == (  # type: ignore[union-attr]
            "the run needs an answer, but 2 runs already wait for one (META_AGENT_MAX_PARKED); "
            "answer or abandon one of them, or call again later"
        )
        done = await round_(0, first.request_state, "deny")
        assert isinstance(done, t.CallToolResult) and done.content[0].text == "done with 0"  # type: ignore[union-attr]
        assert isinstance(await round_(3), t.InputRequiredResult)  # the space the answered run freed
        assert isinstance(await round_(4), t.CallToolResult)  # and no more
    ends = {}
    for path in tmp_path.glob("*.jsonl"):
        records = [json.loads(line) for line in path.read_text().splitlines()]
        ends[records[0]["task"]] = records[-1]
    assert ends["[2]"]["kind"] == "run_finished" and ends["[2]"]["result"]["stop_reason"] == "cancelled"
    assert ends["[0]"]["result"]["stop_reason"] == "final"


async def test_an_unexpected_failure_on_the_parked_path_is_one_line_and_the_server_lives(
    llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fault injection (our own Engine.run made to raise a non-meta-agent error, as a bug would)."""
    from meta_agent.engine import Engine

    real_run = Engine.run
    failures = iter([RuntimeError("injected bug")])

    async def flaky(self: Engine, *args: Any, **kwargs: Any) -> Any:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return await real_run(self, *args, **kwargs)

    monkeypatch.setattr(Engine, "run", flaky)
    server = build_server(Settings(model="openai:fake-model"), {"f": fault_entry()}, openai_env(llm))
    llm.reply(openai_reply("still here"))
    async with Client(server, elicitation_callback=User()) as client:
        broken = await client.call_tool("agent", {"task": "t"})
        assert broken.is_error
        assert broken.content[0].text == "meta-agent failed: RuntimeError: injected bug (the server log has details)"  # type: ignore[union-attr]
        fine = await client.call_tool("agent", {"task": "t"})
        assert fine.content[0].text == "still here"  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def http_url(llm_endpoint: FakeLLM, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`meta-agent serve --transport http` in its own process, with the fault child: its /mcp URL."""
    config = tmp_path_factory.mktemp("http") / "servers.json"
    fault = fault_entry()
    config.write_text(json.dumps({"mcpServers": {"f": {"command": fault.command, "args": list(fault.args)}}}))
    port = free_port()
    serve = ["serve", "--transport", "http", "--port", str(port), "--config", str(config)]
    env = openai_env(llm_endpoint, model="openai:fake-model", base=os.environ, META_AGENT_HTTP_TOKEN=HTTP_TOKEN)
    proc = subprocess.Popen([sys.executable, "-m", "meta_agent", *serve], env=env, stderr=subprocess.PIPE, text=True)
    log = ServerLog(proc.stderr)
    try:
        log.wait_for("serving_http")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        assert proc.stderr is not None
        proc.stderr.close()


async def test_on_2026_07_28_over_http_allow_for_the_session_lasts_the_conversation(
    http_url: str, llm: FakeLLM
) -> None:
    """Over HTTP this era has no session: the answer holds for the conversation (the same conversation_id is not
    asked again, a new conversation is), and the question says so."""
    user = User(accept("allow_session"), accept("deny"))
    for path in ("/a", "/b", "/c"):
        llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": path})))
        llm.reply(openai_reply(f"done with {path}"))
    headers = {"Authorization": f"Bearer {HTTP_TOKEN}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http,
        Client(streamable_http_client(http_url, http_client=http), elicitation_callback=user) as client,
    ):
        assert client.protocol_version == "2026-07-28"
        asked = ProgressLog()
        first = await client.call_tool("agent", {"task": "delete /a"}, progress_callback=asked)
        assert "step 1 · f.delete_file allowed: allowed for this conversation" in asked.messages
        assert user.choices == [
            "allow_once: this call only; allow_session: this tool for the rest of this conversation; "
            "deny: not this time"
        ]
        conversation = first.structured_content["conversation_id"]  # type: ignore[index]
        same = ProgressLog()
        second = await client.call_tool(
            "agent", {"task": "delete /b", "conversation_id": conversation}, progress_callback=same
        )
        assert second.content[0].text == "done with /b"  # type: ignore[union-attr]
        assert len(user.asked) == 1  # the same conversation: not asked again
        assert "step 1 · f.delete_file allowed: already allowed for this conversation" in same.messages
        assert tool_message(llm) == "deleted /b"
        third = await client.call_tool("agent", {"task": "delete /c"})  # a new conversation...
        assert third.content[0].text == "done with /c"  # type: ignore[union-attr]
    assert len(user.asked) == 2  # ...is asked again
    assert tool_message(llm).startswith("[error] the user did not allow f.delete_file (denied)")


class Someone:
    """An elicitation callback that answers every question (approvals and children's alike) from a list, in order,
    and remembers what it was asked."""

    def __init__(self, *answers: t.ElicitResult) -> None:
        self.answers = list(answers)
        self.asked: list[str] = []

    async def __call__(self, _ctx: Any, params: Any) -> t.ElicitResult:
        self.asked.append(params.message)
        return self.answers.pop(0)


SURE = t.ElicitResult(action="accept", content={"sure": True})
DECLINE = t.ElicitResult(action="decline")
CHILD_QUESTIONS = {
    # child era: (its entry, the tool that asks, what it asks, an answer, what the child makes of it, of a decline)
    "2026-07-28": (fault_entry(), "f__confirm", "Are you sure?", SURE, "sure=True", "no answer (decline)"),
    "2025-11-25": (
        everything_entry(trust={"trigger-elicitation-request": "always"}),
        "f__trigger-elicitation-request",
        "Please provide inputs for the following fields:",
        t.ElicitResult(action="accept", content={"name": "Ada"}),
        '"name": "Ada"',
        '"action": "decline"',
    ),
}


@pytest.mark.parametrize("child_era", list(CHILD_QUESTIONS))
@pytest.mark.parametrize("accepted", [True, False], ids=["accept", "decline"])
async def test_a_childs_question_reaches_a_2026_caller_as_a_round_and_its_answer_the_child(
    child_era: str, accepted: bool, llm: FakeLLM
) -> None:
    """The 2026-07-28 caller's SDK drives the rounds: the child's question is asked of its user as the child put it,
    and the user's answer, accept or decline, is what the child gets."""
    entry, tool, asks, answer, accepted_said, declined_said = CHILD_QUESTIONS[child_era]
    server = build_server(Settings(model="openai:fake-model"), {"f": entry}, openai_env(llm))
    llm.reply(openai_reply(None, ("c1", tool, {})))
    llm.reply(openai_reply("ok"))
    user = Someone(answer if accepted else DECLINE)
    async with Client(server, elicitation_callback=user) as client:
        assert client.protocol_version == "2026-07-28"
        with anyio.fail_after(60):
            result = await client.call_tool("agent", {"task": "ask me"})
    assert result.content[0].text == "ok"  # type: ignore[union-attr]
    assert user.asked == [asks]
    assert (accepted_said if accepted else declined_said) in tool_message(llm)


async def test_a_childs_question_round_carries_its_request_as_it_came_and_counts_once(llm: FakeLLM) -> None:
    """Rounds driven by hand: the child's question is the round's "question" request, its schema the child's; an
    answer under another key is a decline for the child, and the same answer sent again counts for nothing."""
    server = build_server(Settings(model="openai:fake-model"), {"f": fault_entry()}, openai_env(llm))
    llm.reply(openai_reply(None, ("c1", "f__confirm", {})))
    llm.reply(openai_reply("ok"))
    async with Client(server, elicitation_callback=Someone()) as client:

        async def round_(state: str | None = None, responses: dict[str, Any] | None = None) -> Any:
            return await client.session.call_tool(
                "agent", {"task": "t"}, allow_input_required=True, input_responses=responses, request_state=state
            )

        first = await round_()
        assert isinstance(first, t.InputRequiredResult) and first.input_requests is not None
        asked = first.input_requests["question"]
        assert list(first.input_requests) == ["question"] and isinstance(asked, t.ElicitRequest)
        assert isinstance(asked.params, t.ElicitRequestFormParams) and asked.params.message == "Are you sure?"
        assert asked.params.requested_schema["properties"]["sure"]["type"] == "boolean"
        last = await round_(first.request_state, {"approval": SURE})  # not under "question": no answer
        assert isinstance(last, t.CallToolResult) and last.content[0].text == "ok"  # type: ignore[union-attr]
        replay = await round_(first.request_state, {"question": SURE})
        assert isinstance(replay, t.CallToolResult) and replay.is_error
        assert "no longer pending" in replay.content[0].text  # type: ignore[union-attr]
    assert tool_message(llm) == "no answer (decline)"


async def test_an_approval_and_a_childs_question_in_one_call_are_asked_in_order(llm: FakeLLM) -> None:
    server = build_server(Settings(model="openai:fake-model"), {"f": fault_entry()}, openai_env(llm))
    llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": "/a"})))
    llm.reply(openai_reply(None, ("c2", "f__confirm", {})))
    llm.reply(openai_reply("both done"))
    user = Someone(accept("allow_once"), SURE)
    progress = ProgressLog()
    async with Client(server, elicitation_callback=user) as client:
        result = await client.call_tool("agent", {"task": "delete, then confirm"}, progress_callback=progress)
    assert result.content[0].text == "both done"  # type: ignore[union-attr]
    assert user.asked == [
        'meta-agent wants to run f.delete_file (destructive) with {"path": "/a"}. Allow it?',
        "Are you sure?",
    ]
    assert [m["content"] for m in llm.requests[-1].body["messages"] if m["role"] == "tool"] == [
        "deleted /a",
        "sure=True",
    ]
    counts = [p for p, _, _ in progress.seen]  # progress went on through the three rounds, counting up
    assert counts == sorted(set(counts)) and progress.messages[-1] == "done · final (3 model calls, 2 tool calls)"


async def test_over_http_a_childs_question_reaches_a_2026_caller(http_url: str, llm: FakeLLM) -> None:
    llm.reply(openai_reply(None, ("c1", "f__confirm", {})))
    llm.reply(openai_reply("confirmed"))
    user = Someone(SURE)
    headers = {"Authorization": f"Bearer {HTTP_TOKEN}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http,
        Client(streamable_http_client(http_url, http_client=http), elicitation_callback=user) as client,
    ):
        assert client.protocol_version == "2026-07-28"
        result = await client.call_tool("agent", {"task": "confirm"})
    assert result.content[0].text == "confirmed"  # type: ignore[union-attr]
    assert user.asked == ["Are you sure?"] and tool_message(llm) == "sure=True"


@pytest.mark.parametrize("sampling", [False, True], ids=["nothing", "sampling-only"])
@pytest.mark.parametrize("child_era", list(CHILD_QUESTIONS))
async def test_a_2026_caller_that_cannot_be_asked_gets_its_child_declined(
    child_era: str, sampling: bool, llm: FakeLLM
) -> None:
    """A caller declaring no elicitation is never asked the child's question: declaring sampling only, its run is
    parked (it could be asked for a completion), yet the child's elicitation is declined unasked."""
    entry, tool, _asks, _answer, _accepted_said, declined_said = CHILD_QUESTIONS[child_era]
    server = build_server(Settings(model="openai:fake-model"), {"f": entry}, openai_env(llm))
    llm.reply(openai_reply(None, ("c1", tool, {})))
    llm.reply(openai_reply("ended"))

    async def never(_ctx: Any, _params: t.CreateMessageRequestParams) -> t.CreateMessageResult:
        raise AssertionError("the child's question is no completion")

    options: dict[str, Any] = {"sampling_callback": never} if sampling else {}
    async with Client(server, **options) as client:  # 2026-07-28, declaring no elicitation
        with anyio.fail_after(60):
            result = await client.call_tool("agent", {"task": "ask me"})
    assert result.content[0].text == "ended"  # type: ignore[union-attr]
    assert declined_said in tool_message(llm)


@pytest.mark.parametrize(
    ("sampling", "elicitation"),
    [(True, True), (True, False), (False, True)],
    ids=["sampling", "sampling-only", "no-sampling"],
)
async def test_a_childs_sampling_reaches_a_2026_caller_that_declared_it(
    sampling: bool, elicitation: bool, llm: FakeLLM
) -> None:
    """server-everything's trigger-sampling-request asks *us* for a completion: a round for a caller that declared
    sampling (with elicitation or without), whose model's answer the child gets; an error for the child otherwise."""
    entry = everything_entry(trust={"trigger-sampling-request": "always"})
    server = build_server(Settings(model="openai:fake-model"), {"f": entry}, openai_env(llm))
    llm.reply(openai_reply(None, ("c1", "f__trigger-sampling-request", {"prompt": "hello"})))
    llm.reply(openai_reply("sampled"))
    prompts: list[str] = []

    async def model(_ctx: Any, params: t.CreateMessageRequestParams) -> t.CreateMessageResult:
        prompts.append(params.messages[0].content.text)  # type: ignore[union-attr]
        text = t.TextContent(type="text", text="the host's model says hi")
        return t.CreateMessageResult(role="assistant", content=text, model="host-model")

    options: dict[str, Any] = {"sampling_callback": model} if sampling else {}
    if elicitation:
        options["elicitation_callback"] = Someone()
    async with Client(server, **options) as client:
        with anyio.fail_after(60):
            result = await client.call_tool("agent", {"task": "sample"})
    assert result.content[0].text == "sampled"  # type: ignore[union-attr]
    told = tool_message(llm)
    if sampling:
        assert prompts == ["Resource trigger-sampling-request context: hello"]
        assert "the host's model says hi" in told
    else:
        assert told.startswith("[error]") and "it declared no sampling capability" in told


async def test_a_childs_question_nobody_answers_reaps_the_run(llm: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 2025-11-25 child asks from its own task, outside the run: unanswered, its question still reaps the run, and
    a late answer is refused."""
    monkeypatch.setattr(parked, "PARK_TIMEOUT", 0.5)
    reaped = anyio.Event()

    def watch(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
        if event.get("event") == "parked_run_reaped":
            reaped.set()
        raise structlog.DropEvent

    entry, tool, *_ = CHILD_QUESTIONS["2025-11-25"]
    server = build_server(Settings(model="openai:fake-model"), {"f": entry}, openai_env(llm))
    llm.reply(openai_reply(None, ("c1", tool, {})))
    old = structlog.get_config()
    structlog.configure(processors=[watch])
    try:
        async with Client(server, elicitation_callback=Someone()) as client:
            first = await client.session.call_tool("agent", {"task": "t"}, allow_input_required=True)
            assert isinstance(first, t.InputRequiredResult) and list(first.input_requests or {}) == ["question"]
            with anyio.fail_after(20):
                await reaped.wait()
            late = await client.session.call_tool(
                "agent",
                {"task": "t"},
                allow_input_required=True,
                input_responses={"question": DECLINE},
                request_state=first.request_state,
            )
            assert isinstance(late, t.CallToolResult) and late.is_error
            assert "no longer pending" in late.content[0].text  # type: ignore[union-attr]
    finally:
        structlog.configure(**old)
