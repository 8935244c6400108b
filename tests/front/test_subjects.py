"""Each subject's state is its own (front/auth/subjects.py): our server over real HTTP in this process (`serve_http` on
127.0.0.1), two callers with the SDK's real Client in both protocol eras. Who a caller is comes either from the auth
layer's verified subject in the ASGI scope (set here by a small wrapper standing in for it, from a test header) or,
without it, from the caller's Authorization header. Another subject presenting a conversation's id, or a run's, gets
exactly what an unknown id gets; a 2026-07-28 round's request state answers for its own subject only; conversation ids
are not derivable from run ids."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as t
import pytest
from conftest import fault_entry, openai_env, serving_asgi
from fake_llm import FakeLLM, openai_reply
from host_doubles import accept, tool_message
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from meta_agent.config.settings import Settings
from meta_agent.front.auth.subjects import SCOPE_KEY, subject_of
from meta_agent.front.http.app import http_app
from meta_agent.front.server import build_server

pytestmark = pytest.mark.anyio

MODEL = "openai:fake-model"
WAIT = 60.0
ERAS = ["2026-07-28", "legacy"]
TEST_SUBJECT = b"x-test-subject"  # what the wrapper below puts in the scope, as the auth layer puts a token's
# Two subjects, as the auth layer tells them apart (one Authorization header for both) or as their headers do.
WHO = {
    "verified": (
        {"X-Test-Subject": "https://id.example#alice", "Authorization": "Bearer shared"},
        {
            "X-Test-Subject": "https://id.example#bob",
            "Authorization": "Bearer shared",
        },
    ),
    "header": ({"Authorization": "Bearer alice"}, {"Authorization": "Bearer bob"}),
}
MADE_UP = "01KMADEUP0000000000000000Z"


class Verified:
    """Stands in for the auth layer: a request's `X-Test-Subject` header as its verified subject, in the scope."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (given := dict(scope["headers"]).get(TEST_SUBJECT)) is not None:
            scope = {**scope, SCOPE_KEY: given.decode()}
        await self.app(scope, receive, send)


@asynccontextmanager
async def served(llm: FakeLLM, tmp_path: Path) -> AsyncIterator[str]:
    """Our server with the fault child over HTTP on 127.0.0.1, its state in `tmp_path`: its /mcp URL."""
    settings = Settings(model=MODEL, conversations_db=tmp_path / "state.sqlite3", trace_dir=tmp_path / "traces")
    server = build_server(settings, {"f": fault_entry()}, openai_env(llm))
    async with serving_asgi(lambda _url: Verified(http_app(server, host="127.0.0.1")), WAIT) as url:
        yield f"{url}/mcp"


async def never_asked(_ctx: Any, _params: Any) -> t.ElicitResult:
    raise AssertionError("the rounds are driven by hand")  # the callback only declares elicitation


@asynccontextmanager
async def caller(url: str, era: str, headers: dict[str, str]) -> AsyncIterator[Client]:
    """The SDK's Client of `era` on `url`, sending `headers` with every request."""
    mode = "legacy" if era == "legacy" else "auto"
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(WAIT, read=300)) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode, elicitation_callback=never_asked) as client,
    ):
        assert client.protocol_version == ("2025-11-25" if era == "legacy" else "2026-07-28")
        yield client


def text_of(result: t.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, t.TextContent))


def test_the_subject_of_a_request() -> None:
    """The verified subject first, then the Authorization header, then the local connection; bounded, opaque, and a
    subject with odd characters (a lone surrogate, a NUL, 10,000 characters) still has one."""

    def request(headers: dict[str, str], verified: str | None = None) -> Request:
        scope: dict[str, Any] = {
            "type": "http",
            "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        }
        if verified is not None:
            scope[SCOPE_KEY] = verified
        return Request(scope)

    alice = subject_of(request({"Authorization": "Bearer x"}, "https://id.example#alice"), "local")
    assert alice == "sub:" + hashlib.sha256(b"https://id.example#alice").hexdigest()[:32]
    assert subject_of(request({"Authorization": "Bearer y"}, "https://id.example#alice"), "local") == alice
    assert subject_of(request({}, "https://id.example#bob"), "local") != alice
    bearer = subject_of(request({"Authorization": "Bearer x"}), "local")
    assert bearer == "http:" + hashlib.sha256(b"Bearer x").hexdigest()[:32]
    assert subject_of(request({}), "local") == "http:" + hashlib.sha256(b"").hexdigest()[:32]
    assert subject_of(None, "local") == "local"
    odd = ["https://id.example#\ud800", "https://id.example#\x00", "x" * 10_000, "https://id.example#a'; drop"]
    subjects = {subject_of(request({}, verified), "local") for verified in odd}
    assert len(subjects) == len(odd) and all(len(s) <= 40 and s.isascii() and "'" not in s for s in subjects)


@pytest.mark.parametrize("who", list(WHO))
@pytest.mark.parametrize("era", ERAS)
async def test_another_subject_is_told_a_conversation_and_a_run_are_unknown(
    era: str, who: str, llm: FakeLLM, tmp_path: Path
) -> None:
    """Bob, given Alice's conversation id and run id, gets exactly what a made-up id gets: continuing her
    conversation is refused before any model turn (he does not see her earlier turns), and her run's resource is
    an unknown run. Alice continues her conversation and reads her run."""
    alice_headers, bob_headers = WHO[who]
    llm.reply(openai_reply("The number is 42."))
    llm.reply(openai_reply("It was 42."))
    async with (
        served(llm, tmp_path) as url,
        caller(url, era, alice_headers) as alice,
        caller(url, era, bob_headers) as bob,
    ):
        first = await alice.call_tool("agent", {"task": "Remember the number 42."})
        assert not first.is_error and first.structured_content is not None, first
        conversation, run_id = first.structured_content["conversation_id"], first.structured_content["run_id"]

        theirs = await bob.call_tool("agent", {"task": "What was the number?", "conversation_id": conversation})
        nobodys = await bob.call_tool("agent", {"task": "What was the number?", "conversation_id": MADE_UP})
        assert theirs.is_error and nobodys.is_error, (theirs, nobodys)
        assert text_of(theirs) == text_of(nobodys).replace(MADE_UP, conversation), text_of(theirs)
        assert "unknown conversation" in text_of(theirs)

        errors = []
        for run in (run_id, MADE_UP):
            with pytest.raises(MCPError) as refused:
                await bob.read_resource(f"meta-agent://runs/{run}")
            errors.append((refused.value.error.code, refused.value.error.message.replace(run, "RUN")))
        assert errors[0] == errors[1] and "unknown run" in errors[0][1], errors

        state = await alice.read_resource(f"meta-agent://runs/{run_id}")
        [contents] = state.contents
        assert isinstance(contents, t.TextResourceContents) and '"status": "done"' in contents.text
        second = await alice.call_tool("agent", {"task": "What was the number?", "conversation_id": conversation})
        assert text_of(second) == "It was 42.", second
    assert len(llm.requests) == 2  # Bob's attempts never reached the model
    assert "Remember the number 42." in str(llm.requests[1].body["messages"])  # Alice's own earlier turn


async def test_a_round_replayed_by_another_subject_is_refused_and_its_run_waits_for_its_own(
    llm: FakeLLM, tmp_path: Path
) -> None:
    """2026-07-28: Alice's run asks to delete /a. Bob, holding her round's request state, retries it with an answer:
    he is refused as a forged request state is, and nothing runs. The question still waits for Alice, whose answer
    runs the tool, once."""
    llm.reply(openai_reply(None, ("c1", "f__delete_file", {"path": "/a"})))
    llm.reply(openai_reply("Deleted."))
    alice_headers, bob_headers = WHO["verified"]
    allow = {"approval": accept("allow_once")}

    async with served(llm, tmp_path) as url, caller(url, "2026-07-28", alice_headers) as alice:

        async def round_(client: Client, state: str | None = None) -> Any:
            return await client.session.call_tool(
                "agent",
                {"task": "Delete /a."},
                allow_input_required=True,
                input_responses=allow if state else None,
                request_state=state,
            )

        first = await round_(alice)
        assert isinstance(first, t.InputRequiredResult) and first.request_state, first
        async with caller(url, "2026-07-28", bob_headers) as bob:
            errors = []
            for state in (first.request_state, first.request_state[:-4] + "AAAA"):
                with pytest.raises(MCPError) as refused:
                    await round_(bob, state)
                errors.append((refused.value.error.code, refused.value.error.message))
        assert errors[0] == errors[1], errors
        assert len(llm.requests) == 1  # nothing ran: the run still waits for its answer
        last = await round_(alice, first.request_state)
        assert isinstance(last, t.CallToolResult) and text_of(last) == "Deleted.", last
    assert tool_message(llm) == "deleted /a"
    assert len(llm.requests) == 2


async def test_conversation_ids_share_nothing_with_run_ids_in_a_burst(llm: FakeLLM, tmp_path: Path) -> None:
    """A burst of runs, made in the same milliseconds: no conversation id shares its run id's time prefix, none is
    near any run id (a monotonic generator makes the next id the last plus one), and all differ."""
    burst = 12
    for n in range(burst):
        llm.reply(openai_reply(f"answer {n}"))
    settings = Settings(model=MODEL, conversations_db=tmp_path / "state.sqlite3", trace_dir=tmp_path / "traces")
    server = build_server(settings, {}, openai_env(llm))
    made: list[tuple[str, str]] = []
    async with Client(server) as client:

        async def one(n: int) -> None:
            result = await client.call_tool("ask", {"prompt": f"question {n}"})
            assert result.structured_content is not None, result
            made.append((result.structured_content["run_id"], result.structured_content["conversation_id"]))

        async with anyio.create_task_group() as tg:
            for n in range(burst):
                tg.start_soon(one, n)
    runs = [run for run, _ in made]
    conversations = [conversation for _, conversation in made]
    assert len(set(conversations)) == burst and not set(conversations) & set(runs)
    for run, conversation in made:
        assert conversation[:10] != run[:10], (run, conversation)  # not the same millisecond's time prefix
    for conversation in conversations:
        assert all(abs(number(conversation) - number(run)) > 2**32 for run in runs), (conversation, runs)


def number(ulid: str) -> int:
    """A ULID's 128 bits as a number (Crockford base32)."""
    digits = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
    value = 0
    for char in ulid:
        value = value * 32 + digits.index(char)
    return value
