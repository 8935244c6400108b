"""Attacks on the apps' tools and the console found in review (front/apps, front/http/console*): each test is a break
that was found, and stays closed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import mcp.types as t
import pytest
from conftest import fault_entry, openai_env, tool_spec
from fake_llm import FakeLLM, openai_reply
from host_doubles import accept, call_ids
from mcp import Client
from test_apps import UI, app, pending_of, settings

from meta_agent.front.apps.approver import UNANSWERED, ViewAnswers, ViewApprover
from meta_agent.front.server import build_server

pytestmark = pytest.mark.anyio


async def pending_run(host: Client) -> tuple[str, dict[str, Any]]:
    """The caller's running run that asks, as a view on another replica finds it: its id and its question."""
    with anyio.fail_after(30):
        while True:
            for run in (await app(host, "app_runs"))["runs"]:
                page = await app(host, "app_run", run_id=run["run_id"])
                if page["pending"]:
                    return run["run_id"], page["pending"][0]
            await anyio.sleep(0.05)


async def test_a_late_allow_for_the_session_after_the_view_denied_allows_nothing(llm: FakeLLM, tmp_path: Path) -> None:
    """The view (through another replica) denies; the host's own question, answered "allow for this session" just
    after, lost: it must not allow the tool for the rest of the session either. The next call of it is asked."""
    one = build_server(settings(tmp_path), {"f": fault_entry()}, openai_env(llm))
    other = build_server(settings(tmp_path), {}, openai_env(llm))
    llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": "/tmp/a"})))
    llm.reply(openai_reply(None, ("c2", "f__delete_file", {"path": "/tmp/b"})))
    llm.reply(openai_reply("finished"))
    denied = anyio.Event()
    asked: list[str] = []

    async def late(_ctx: Any, params: Any) -> t.ElicitResult:
        asked.append(params.message)
        if len(asked) == 1:
            with anyio.fail_after(30):
                await denied.wait()
            return accept("allow_session")
        return accept("deny")

    results: list[t.CallToolResult] = []
    async with (
        Client(one, mode="legacy", extensions=UI, elicitation_callback=late) as host,
        Client(other, extensions=UI) as view,
        anyio.create_task_group() as tg,
    ):

        async def call() -> None:
            with call_ids(host, "c-1"):
                results.append(await host.call_tool("agent", {"task": "delete two files"}))

        tg.start_soon(call)
        run_id, question = await pending_run(view)
        answer = await app(view, "app_answer", run_id=run_id, key=question["key"], decision="deny")
        assert answer["ok"] and not answer["allowed"]
        denied.set()
    (result,) = results
    calls = [call for step in result.structured_content["steps"] for call in step["tool_calls"]]  # type: ignore[index]
    assert [call["ok"] for call in calls] == [False, False], calls
    assert len(asked) == 2  # the second call was asked again, not allowed by the lost answer


async def test_a_cursor_past_the_databases_integers_is_refused_in_one_line(llm: FakeLLM, tmp_path: Path) -> None:
    server = build_server(settings(tmp_path), {}, openai_env(llm))
    llm.reply(openai_reply("hi"))
    async with Client(server, extensions=UI) as host:
        run_id = (await host.call_tool("ask", {"prompt": "hi"})).structured_content["run_id"]  # type: ignore[index]
        answer = await host.call_tool("app_run", {"run_id": run_id, "after": 2**63})
    assert answer.is_error
    assert "after" in answer.content[0].text, answer.content  # type: ignore[union-attr]


async def test_a_pending_questions_arguments_are_cut_as_the_runs_events_are(llm: FakeLLM, tmp_path: Path) -> None:
    """A model may send a call's arguments up to 32 million characters long; a view polls its run once a second, and
    each answer must stay about the size of a page, not carry them whole every time."""
    server = build_server(settings(tmp_path), {"f": fault_entry()}, openai_env(llm))
    llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": "/tmp/" + "x" * 2_000_000 + "\u202e"})))
    llm.reply(openai_reply("finished"))
    async with Client(server, extensions=UI) as host, anyio.create_task_group() as tg:

        async def call() -> None:
            with call_ids(host, "big-1"):
                await host.call_tool("agent", {"task": "delete a long path"})

        tg.start_soon(call)
        run_id, question = await pending_of(host, "big-1")
        await app(host, "app_answer", run_id=run_id, key=question["key"], decision="deny")
    assert len(json.dumps(question["arguments"])) < 10_000
    assert "more characters not shown" in json.dumps(question["arguments"])


async def test_the_runs_events_redact_secrets_as_its_trace_does(llm: FakeLLM, tmp_path: Path) -> None:
    """What a view reads is kept in the database for as long as the run is: a secret a tool or the model quoted (the
    provider's key, a key-shaped string) is redacted there as in the run's trace."""
    server = build_server(settings(tmp_path), {"f": fault_entry()}, openai_env(llm))
    secret = "sk-abcdefghijklmnop"
    llm.reply(openai_reply("Here: sk-test", ("c1", "f__echo", {"text": f"the key is {secret} (sk-test)"})))
    llm.reply(openai_reply(f"It was {secret}."))
    async with Client(server, extensions=UI) as host:
        run_id = (await host.call_tool("agent", {"task": "echo the key"})).structured_content["run_id"]  # type: ignore[index]
        with anyio.fail_after(30):
            while (page := await app(host, "app_run", run_id=run_id))["run"]["status"] == "running":
                await anyio.sleep(0.05)
    shown = json.dumps(page["events"])
    assert "tool_result" in shown and "[redacted]" in shown
    assert secret not in shown and "sk-test" not in shown


class _FailingReads:
    """The questions' store of a database that takes an answer, then cannot be read for a while."""

    class database:
        errors = (OSError,)

    def __init__(self) -> None:
        self.reads = 0
        self.settled: list[str] = []

    async def ask(self, *_args: Any) -> None:
        return None

    async def answer_of(self, _run_id: str, _key: str) -> None:
        self.reads += 1
        raise OSError("the database went away")

    async def settle(self, _run_id: str, _key: str, _owner: object, answer: Any) -> tuple[Any, bool]:
        self.settled.append(answer.answer)
        return answer, True


async def test_an_answer_the_database_cannot_read_back_is_waited_for_not_spun_on() -> None:
    """The view's answer wakes its question at once; when the database then cannot be read, the question is polled
    once a second as before, not re-read in a tight loop that counts each pass as a second and denies the call as
    unanswered for 15 minutes within moments."""
    questions = _FailingReads()
    answers = ViewAnswers()
    approver = ViewApprover(None, questions, answers, run_id="R", owner="o")  # type: ignore[arg-type]
    verdicts: list[Any] = []
    async with anyio.create_task_group() as tg:

        async def ask() -> None:
            verdicts.append(await approver.ask(tool_spec({}), {}))

        tg.start_soon(ask)
        await anyio.sleep(0.1)
        (key,) = [key for _run, key in answers._waiting]
        answers.answered("R", key)
        await anyio.sleep(1.5)
        tg.cancel_scope.cancel()
    assert questions.reads <= 4, questions.reads
    assert UNANSWERED not in questions.settled and not verdicts
