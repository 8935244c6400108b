"""The web console at /ui (front/http/console.py), over real HTTP to our app served in this process (`serving_asgi`),
with the real openai SDK against a fake model: the pages and their headers, who may use it (the static token's
bearer header and one-time sign-in link, OAuth bearer tokens and the OAuth sign-in against the tests' own
authorization server, fixtures/oauth_server.py), the subject it gives (the one /mcp gives the same credentials),
CSRF, and what a hostile or flooding caller gets."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
import pytest
from conftest import http_serving, openai_env, serving_asgi
from fake_llm import FakeLLM, openai_reply
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from oauth_server import AuthServer
from starlette.applications import Starlette

from meta_agent.apps.pages import inline_hashes, page
from meta_agent.config.settings import Settings
from meta_agent.front.auth.resource_server import ResourceServer
from meta_agent.front.http import console as console_module
from meta_agent.front.http.app import console_of, http_app
from meta_agent.front.http.console_auth import CODE_SECONDS, SESSION_COOKIE, SESSION_SECONDS
from meta_agent.front.http.console_calls import TOOLS
from meta_agent.front.server import build_server

pytestmark = [pytest.mark.anyio, pytest.mark.quick]

MODEL = "openai:fake-model"
TOKEN = "console-test-token-" + "x" * 20
SCOPE = "mcp:tools"
WAIT = 60.0
UI = {"X-Meta-Agent-UI": "1"}
MADE_UP = "01KMADEUP0000000000000000Z"


@dataclass
class Served:
    url: str
    app: Starlette

    def api(
        self, http: httpx2.AsyncClient, tool: str, headers: dict[str, str] | None = None, /, **arguments: Any
    ) -> Any:
        """POST /ui/api/call of `tool` with `arguments`, as the pages send it (plus `headers`)."""
        body = json.dumps({"name": tool, "arguments": arguments})  # ASCII: a lone surrogate is sent escaped
        sent = {**UI, "Content-Type": "application/json", **(headers or {})}
        return http.post(f"{self.url}/ui/api/call", content=body, headers=sent)

    @property
    def origin(self) -> dict[str, str]:
        return {"Origin": self.url}


@asynccontextmanager
async def served(llm: FakeLLM, tmp_path: Path, **options: Any) -> AsyncIterator[Served]:
    """Our server without children, its state in `tmp_path`, as http_app makes it with `options` (`auth` may be a
    function of the base URL)."""
    settings = Settings(model=MODEL, conversations_db=tmp_path / "state.sqlite3", trace_dir=tmp_path / "traces")
    server = build_server(settings, {}, openai_env(llm))
    made: list[Starlette] = []

    def make(url: str) -> Starlette:
        auth = options.get("auth")
        chosen = {**options, "auth": auth(url) if callable(auth) else auth}
        made.append(http_app(server, host="127.0.0.1", **chosen))
        return made[0]

    async with serving_asgi(make, WAIT) as url:
        yield Served(url, made[0])


@pytest.fixture(scope="module")
def issuer() -> Iterator[AuthServer]:
    with AuthServer() as server:
        yield server


def resource_for(issuer: AuthServer) -> Any:
    return lambda url: ResourceServer(issuer=issuer.url, audience=f"{url}/mcp", scopes=(SCOPE,))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def line_of(answer: httpx2.Response) -> str:
    body = answer.json()
    assert body["isError"] is True, body
    (content,) = body["content"]
    assert "\n" not in content["text"]
    return str(content["text"])


async def until_done(site: Served, http: httpx2.AsyncClient, run_id: str, headers: dict[str, str]) -> dict[str, Any]:
    with anyio.fail_after(30):
        while True:
            answer = await site.api(http, "app_run", headers, run_id=run_id)
            data = answer.json()["structuredContent"]  # `run` is None until the run's row is written
            if data["run"] is not None and data["run"]["status"] == "done" and not data["more"]:
                return dict(data)
            await anyio.sleep(0.05)


def cookie_attributes(answer: httpx2.Response, name: str) -> dict[str, str]:
    (header,) = [value for value in answer.headers.get_list("set-cookie") if value.startswith(f"{name}=")]
    parts = [part.strip() for part in header.split(";")]
    return {key.lower(): value for key, _, value in (part.partition("=") for part in parts[1:])} | {
        "value": parts[0].partition("=")[2]
    }


async def signed_in(site: Served, http: httpx2.AsyncClient) -> str:
    link = console_of(site.app).sign_in_link(site.url)
    assert link is not None
    answer = await http.get(link)
    assert answer.status_code == 303 and answer.headers["location"] == "/ui"
    return cookie_attributes(answer, SESSION_COOKIE)["value"]


async def test_the_pages_are_served_with_their_policy(llm: FakeLLM, tmp_path: Path) -> None:
    async with served(llm, tmp_path, token=TOKEN) as site, httpx2.AsyncClient(timeout=WAIT) as http:
        for path, view in [("/ui", "runs"), ("/ui/tools", "tools"), (f"/ui/runs/{MADE_UP}", "run")]:
            answer = await http.get(f"{site.url}{path}", headers=bearer(TOKEN))
            assert answer.status_code == 200, path
            assert answer.text == page(view)  # type: ignore[arg-type]
            assert answer.headers["content-type"].startswith("text/html")
            script, style = inline_hashes(view)  # type: ignore[arg-type]
            assert answer.headers["content-security-policy"] == (
                f"default-src 'none'; script-src {script}; style-src {style}; img-src data:; connect-src 'self';"
                " base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
            )
            assert answer.headers["x-content-type-options"] == "nosniff"
            assert answer.headers["referrer-policy"] == "no-referrer"
            assert answer.headers["cache-control"] == "no-store"
        for odd in ["01kmadeup0000000000000000z", MADE_UP + "0", "..%2F..%2Fetc", "A" * 6000, "%00" * 26]:
            answer = await http.get(f"{site.url}/ui/runs/{odd}", headers=bearer(TOKEN))
            assert answer.status_code == 404, odd
            assert answer.headers["content-security-policy"].startswith("default-src 'none'")
        slash = await http.get(f"{site.url}/ui/")
        assert (slash.status_code, slash.headers["location"]) == (308, "/ui")
        elsewhere = await http.get(f"{site.url}/ui/api/nothing", headers=bearer(TOKEN))
        assert elsewhere.status_code == 404 and set(elsewhere.json()) == {"error"}
        api = await site.api(http, "app_runs", bearer(TOKEN))
        assert api.headers["cache-control"] == "no-store" and api.headers["x-content-type-options"] == "nosniff"
        # the Host guard of /mcp stands in front of the console too, and its refusals carry the headers as well
        rebound = await http.get(f"{site.url}/ui", headers={**bearer(TOKEN), "Host": "attacker.example:80"})
        assert rebound.status_code == 421 and rebound.headers["cache-control"] == "no-store"
        foreign = await site.api(http, "app_runs", {**bearer(TOKEN), "Origin": "http://attacker.example"})
        assert foreign.status_code == 403


async def test_without_credentials_a_page_sends_to_sign_in_and_the_api_says_401(llm: FakeLLM, tmp_path: Path) -> None:
    async with served(llm, tmp_path, token=TOKEN) as site, httpx2.AsyncClient(timeout=WAIT) as http:
        for path in ["/ui", "/ui/tools", f"/ui/runs/{MADE_UP}"]:
            answer = await http.get(f"{site.url}{path}")
            assert (answer.status_code, answer.headers["location"]) == (303, "/ui/sign-in")
        for headers in [{}, bearer("wrong"), {"Authorization": "Basic " + TOKEN}, {"Cookie": f"{SESSION_COOKIE}=x"}]:
            refused = await site.api(http, "app_runs", headers)
            assert refused.status_code == 401, headers
            assert set(refused.json()) == {"error"} and "\n" not in refused.json()["error"]
        sign_in = await http.get(f"{site.url}/ui/sign-in")
        assert sign_in.status_code == 200 and "sign-in link" in sign_in.text and TOKEN not in sign_in.text
        assert (await site.api(http, "app_runs", bearer(TOKEN))).json()["isError"] is False


async def test_the_console_is_open_where_mcp_is(llm: FakeLLM, tmp_path: Path) -> None:
    async with served(llm, tmp_path) as site, httpx2.AsyncClient(timeout=WAIT) as http:
        assert (await http.get(f"{site.url}/ui")).status_code == 200
        answer = await site.api(http, "app_runs")
        assert answer.status_code == 200 and answer.json()["structuredContent"] == {"runs": []}
        sign_in = await http.get(f"{site.url}/ui/sign-in")
        assert (sign_in.status_code, sign_in.headers["location"]) == (303, "/ui")
        assert console_of(site.app).sign_in_link(site.url) is None


async def test_the_console_gives_the_subject_mcp_gives(llm: FakeLLM, tmp_path: Path) -> None:
    """A run made through /mcp with the static token is the console's, signed in by the link or by the header; the
    console's run of the open server (no header) is not the token's."""
    llm.reply(openai_reply("Noon."))
    llm.reply(openai_reply("Midnight."))
    async with served(llm, tmp_path, token=TOKEN) as site, httpx2.AsyncClient(timeout=WAIT) as http:
        async with (
            httpx2.AsyncClient(headers=bearer(TOKEN), timeout=WAIT) as mcp_http,
            Client(streamable_http_client(f"{site.url}/mcp", http_client=mcp_http)) as client,
        ):
            result = await client.call_tool("agent", {"task": "what time is it"})
        assert result.structured_content is not None
        run_id = result.structured_content["run_id"]
        listed = await site.api(http, "app_runs", bearer(TOKEN))
        assert [run["run_id"] for run in listed.json()["structuredContent"]["runs"]] == [run_id]
        cookie = await signed_in(site, http)
        by_cookie = await site.api(
            http, "app_run", {**site.origin, "Cookie": f"{SESSION_COOKIE}={cookie}"}, run_id=run_id
        )
        assert by_cookie.json()["structuredContent"]["result"]["answer"] == "Noon."
        started = await site.api(http, "app_start", bearer(TOKEN), task="and now?", mode="ask")
        second = started.json()["structuredContent"]["run_id"]
        assert (await until_done(site, http, second, bearer(TOKEN)))["result"]["answer"] == "Midnight."


async def test_two_subjects_cannot_see_each_others_runs(llm: FakeLLM, tmp_path: Path, issuer: AuthServer) -> None:
    llm.reply(openai_reply("Alice's answer."))
    async with served(llm, tmp_path, auth=resource_for(issuer)) as site, httpx2.AsyncClient(timeout=WAIT) as http:
        alice = bearer(issuer.mint(sub="alice", aud=f"{site.url}/mcp", scope=SCOPE))
        bob = bearer(issuer.mint(sub="bob", aud=f"{site.url}/mcp", scope=SCOPE))
        started = await site.api(http, "app_start", alice, task="a secret task", mode="ask")
        run_id = started.json()["structuredContent"]["run_id"]
        assert re.fullmatch(r"[0-9A-Z]{26}", run_id)
        assert (await until_done(site, http, run_id, alice))["result"]["answer"] == "Alice's answer."
        assert line_of(await site.api(http, "app_run", bob, run_id=run_id)) == f"unknown run {run_id!r}"
        assert line_of(await site.api(http, "app_run", bob, run_id=MADE_UP)) == f"unknown run {MADE_UP!r}"
        assert (await site.api(http, "app_runs", bob)).json()["structuredContent"] == {"runs": []}
        mine = (await site.api(http, "app_runs", alice)).json()["structuredContent"]["runs"]
        assert [run["run_id"] for run in mine] == [run_id]
        refused = await site.api(http, "app_answer", bob, run_id=run_id, key="a1", decision="approve")
        assert line_of(refused).startswith("no question 'a1' of run")
        # /mcp's own checks: another audience, a scope missing, an expired token
        other = await site.api(http, "app_runs", bearer(issuer.mint(aud="http://elsewhere/mcp", scope=SCOPE)))
        assert other.status_code == 401 and "not for this resource" in other.json()["error"]
        short = await site.api(http, "app_runs", bearer(issuer.mint(aud=f"{site.url}/mcp", scope="other")))
        assert short.status_code == 403 and short.json()["error"] == f"missing scope: {SCOPE}"
        old = issuer.mint(aud=f"{site.url}/mcp", scope=SCOPE, exp=int(time.time()) - 3600)
        assert (await site.api(http, "app_runs", bearer(old))).json()["error"] == "the token has expired"


async def test_the_sign_in_link_works_once(llm: FakeLLM, tmp_path: Path) -> None:
    async with served(llm, tmp_path, token=TOKEN) as site, httpx2.AsyncClient(timeout=WAIT) as http:
        console = console_of(site.app)
        link = console.sign_in_link(site.url)
        assert link is not None and re.fullmatch(rf"{site.url}/ui/sign-in\?code=[A-Za-z0-9_-]{{43}}", link)
        answer = await http.get(link)
        assert (answer.status_code, answer.headers["location"]) == (303, "/ui")
        cookie = cookie_attributes(answer, SESSION_COOKIE)
        assert cookie["path"] == "/ui" and cookie["samesite"].lower() == "strict" and "httponly" in cookie
        assert "secure" not in cookie and cookie["max-age"] == str(SESSION_SECONDS)
        assert TOKEN not in cookie["value"]
        again = await http.get(link)
        assert again.status_code == 403 and "wrong, used or expired" in again.text
        assert "set-cookie" not in again.headers
        forged = await http.get(f"{site.url}/ui/sign-in?code={'A' * 43}")
        assert forged.status_code == 403
        assert (await http.get(f"{site.url}/ui/sign-in?code={'A' * 5000}")).status_code == 403
        stale = console.sign_in_link(site.url)
        assert stale is not None
        clock = console.auth.codes.clock
        console.auth.codes.clock = lambda: clock() + CODE_SECONDS + 1
        try:
            assert (await http.get(stale)).status_code == 403
        finally:
            console.auth.codes.clock = clock
        # over https (as a proxy on this machine says), the cookie is Secure
        secure = await http.get(console.sign_in_link(site.url) or "", headers={"X-Forwarded-Proto": "https"})
        assert "secure" in cookie_attributes(secure, SESSION_COOKIE)
        jar = {"Cookie": f"{SESSION_COOKIE}={cookie['value']}"}
        assert (await http.get(f"{site.url}/ui", headers=jar)).status_code == 200
        assert (await site.api(http, "app_runs", {**jar, **site.origin})).json()["isError"] is False
        payload, _, mac = cookie["value"].partition(".")
        for tampered in [f"{payload}.{mac[:-2]}AA", f"{payload[:-2]}AA.{mac}", payload, "", "x" * 3000]:
            bad = {"Cookie": f"{SESSION_COOKIE}={tampered}"}
            assert (await site.api(http, "app_runs", {**bad, **site.origin})).status_code == 401
            assert (await http.get(f"{site.url}/ui", headers=bad)).status_code == 303


async def test_the_session_cookie_holds_for_the_same_token_only(llm: FakeLLM, tmp_path: Path) -> None:
    """Another replica (or a restart) with the same token takes the cookie; with another token, nobody's is."""
    async with served(llm, tmp_path / "a", token=TOKEN) as first, httpx2.AsyncClient(timeout=WAIT) as http:
        cookie = await signed_in(first, http)
    jar = {"Cookie": f"{SESSION_COOKIE}={cookie}"}
    async with served(llm, tmp_path / "b", token=TOKEN) as again, httpx2.AsyncClient(timeout=WAIT) as http:
        assert (await again.api(http, "app_runs", {**jar, **again.origin})).status_code == 200
    async with served(llm, tmp_path / "c", token=TOKEN + "2") as other, httpx2.AsyncClient(timeout=WAIT) as http:
        assert (await other.api(http, "app_runs", {**jar, **other.origin})).status_code == 401


async def test_a_call_from_another_site_is_refused(llm: FakeLLM, tmp_path: Path) -> None:
    async with served(llm, tmp_path, token=TOKEN) as site, httpx2.AsyncClient(timeout=WAIT) as http:
        jar = {"Cookie": f"{SESSION_COOKIE}={await signed_in(site, http)}"}
        url = f"{site.url}/ui/api/call"
        body = '{"name": "app_runs", "arguments": {}}'
        json_type = {"Content-Type": "application/json"}
        localhost = site.url.replace("127.0.0.1", "localhost")  # an origin the guard answers, not the request's own
        refused = [
            {**jar, **json_type, **site.origin},  # without X-Meta-Agent-UI
            {**jar, **UI, **json_type},  # a cookie without an Origin
            {**jar, **UI, **json_type, "Origin": localhost},
            {**jar, **UI, **json_type, "Origin": "http://attacker.example"},
            {**jar, **UI, **json_type, "Origin": "null"},
            {**jar, **UI, **json_type, **site.origin, "Sec-Fetch-Site": "cross-site"},
            {**jar, **UI, **site.origin, "Content-Type": "application/x-www-form-urlencoded"},
            {**jar, **UI, **site.origin, "Content-Type": "text/plain"},
            {**jar, **UI, **site.origin, "Content-Type": "multipart/form-data; boundary=x"},
        ]
        for headers in refused:
            answer = await http.post(url, content=body, headers=headers)
            assert answer.status_code == 403, headers
            assert "\n" not in answer.json()["error"]
        for headers in [
            {**jar, **UI, **json_type, **site.origin},
            {**jar, **UI, **json_type, "Sec-Fetch-Site": "same-origin"},
            {**bearer(TOKEN), **UI, "Content-Type": "application/json; charset=utf-8"},  # no cookie: no Origin needed
        ]:
            answer = await http.post(url, content=body, headers=headers)
            assert answer.status_code == 200 and answer.json()["isError"] is False, headers
        assert (await http.get(url, headers={**jar, **UI})).status_code == 405


async def test_oauth_sign_in_end_to_end(llm: FakeLLM, tmp_path: Path, issuer: AuthServer) -> None:
    client_id = "console-client"
    auth = resource_for(issuer)
    async with served(llm, tmp_path, auth=auth, ui_client_id=client_id) as site:
        issuer.clients[client_id] = {"client_id": client_id, "redirect_uris": [f"{site.url}/ui/callback"]}
        async with httpx2.AsyncClient(timeout=WAIT, follow_redirects=True) as browser:
            done = await browser.get(f"{site.url}/ui/sign-in")
            assert done.status_code == 200, done.text
            assert '<meta http-equiv="refresh" content="0; url=/ui">' in done.text
            to_issuer, back = done.history
            asked = parse_qs(urlsplit(to_issuer.headers["location"]).query)
            assert asked["resource"] == [f"{site.url}/mcp"] and asked["scope"] == [SCOPE]
            assert asked["code_challenge_method"] == ["S256"] and asked["client_id"] == [client_id]
            assert asked["redirect_uri"] == [f"{site.url}/ui/callback"] and len(asked["state"][0]) >= 43
            flow = cookie_attributes(to_issuer, "meta_agent_ui_flow")
            assert flow["samesite"].lower() == "lax" and "httponly" in flow and flow["path"] == "/ui"
            session = cookie_attributes(done, SESSION_COOKIE)
            assert session["samesite"].lower() == "strict" and "httponly" in session and session["path"] == "/ui"
            assert back.status_code == 302 and "/ui/callback?" in back.headers["location"]
            page_ = await browser.get(f"{site.url}/ui")
            assert page_.status_code == 200 and page_.text == page("runs")
            answer = await site.api(browser, "app_runs", site.origin)
            assert answer.status_code == 200 and answer.json()["isError"] is False
            # the same subject as the issuer's token for this client on /mcp
            llm.reply(openai_reply("Hello."))
            direct = bearer(issuer.mint(sub=f"user-{client_id}", aud=f"{site.url}/mcp", scope=SCOPE))
            started = await site.api(browser, "app_start", direct, task="hi", mode="ask")
            run_id = started.json()["structuredContent"]["run_id"]
            listed = (await site.api(browser, "app_runs", site.origin)).json()["structuredContent"]["runs"]
            assert [run["run_id"] for run in listed] == [run_id]
            replayed = await browser.get(str(back.headers["location"]))  # the flow cookie is gone, the code used
            assert replayed.status_code == 403
        async with httpx2.AsyncClient(timeout=WAIT, follow_redirects=False) as browser:
            started_ = await browser.get(f"{site.url}/ui/sign-in")
            assert started_.status_code == 303
            state = parse_qs(urlsplit(started_.headers["location"]).query)["state"][0]
            forged = await browser.get(f"{site.url}/ui/callback?code=x&state=not-the-state")
            assert forged.status_code == 403 and "state" in forged.text
            assert "set-cookie" not in forged.headers  # this browser's own sign-in goes on
            denied = await browser.get(f"{site.url}/ui/callback?error=access_denied&state={state}")
            assert denied.status_code == 403 and "access_denied" in denied.text
            assert not any(c.startswith(f"{SESSION_COOKIE}=") for c in denied.headers.get_list("set-cookie"))
            gone = await browser.get(f"{site.url}/ui/callback?code=x&state={state}")  # the flow cookie was dropped
            assert gone.status_code == 403 and "not started here" in gone.text
    async with served(llm, tmp_path / "no-client", auth=auth) as site, httpx2.AsyncClient(timeout=WAIT) as http:
        sign_in = await http.get(f"{site.url}/ui/sign-in")
        assert sign_in.status_code == 200 and "META_AGENT_UI_CLIENT_ID" in sign_in.text
        assert (await http.get(f"{site.url}/ui/callback?code=x&state=y")).status_code == 404


async def test_hostile_calls_get_one_line(llm: FakeLLM, tmp_path: Path) -> None:
    async with served(llm, tmp_path, token=TOKEN) as site, httpx2.AsyncClient(timeout=WAIT) as http:
        url, headers = f"{site.url}/ui/api/call", {**bearer(TOKEN), **UI, "Content-Type": "application/json"}
        huge = await http.post(
            url, content=b'{"name": "app_runs", "arguments": {"x": "' + b"a" * 2_000_000, headers=headers
        )
        assert huge.status_code == 413
        for body, status in [
            (b"{not json", 400),
            (b"\xff\xfe", 400),
            (b"[" * 100_000 + b"]" * 100_000, 400),
            (b'["app_runs"]', 400),
            (b'{"name": "app_runs", "arguments": [1]}', 400),
            (b'{"name": "app_runs", "extra": 1}', 400),
            (b'{"name": "ask", "arguments": {"task": "x"}}', 404),
            (b'{"name": "tools", "arguments": {}}', 404),
            (b'{"name": "' + b"z" * 10_000 + b'"}', 404),
        ]:
            answer = await http.post(url, content=body, headers=headers)
            assert answer.status_code == status, body[:40]
            assert set(answer.json()) == {"error"} and "\n" not in answer.json()["error"]
        odd = {
            "app_runs": [({"limit": 0}, "limit: "), ({"limit": "many"}, "limit: "), ({"limt": 5}, "did you mean")],
            "app_run": [
                ({"after": -1}, "after: "),
                ({"after": 2**63}, "after: "),  # past what SQLite or PostgreSQL can take: not a crash
                ({"run_id": "A" * 101}, "run_id: "),
                ({"run_id": "../../etc/passwd"}, "unknown run"),
                ({"run_id": "\u202e\x00<b>"}, "unknown run"),
                ({"run_id": "\ud800"}, "run_id: input should be a valid string"),
                ({"request_id": "r" * 1001}, "request_id: longer than 1000 characters"),
                ({}, "give run_id, or request_id"),
            ],
            "app_start": [({"task": "   "}, "task: "), ({"task": "x", "mode": "yolo"}, "mode: ")],
            "app_set_tool": [({"name": "nope"}, "no tool 'nope'"), ({}, "name: required argument of app_set_tool")],
            "app_answer": [({"run_id": MADE_UP, "key": "k", "decision": "maybe"}, "decision: ")],
        }
        for name, cases in odd.items():
            for arguments, said in cases:
                answer = await site.api(http, name, bearer(TOKEN), **arguments)
                assert answer.status_code == 200
                assert said in line_of(answer), (name, arguments)


async def test_a_flood_of_calls_stays_cheap(llm: FakeLLM, tmp_path: Path) -> None:
    statuses: list[int] = []
    limits = httpx2.Limits(max_connections=500, max_keepalive_connections=500)
    async with (
        served(llm, tmp_path, token=TOKEN) as site,
        httpx2.AsyncClient(timeout=WAIT, limits=limits) as http,
    ):

        async def call() -> None:
            answer = await site.api(http, "app_runs", bearer(TOKEN))
            statuses.append(answer.status_code)
            if answer.status_code == 200:
                assert answer.json()["isError"] is False

        began = time.monotonic()
        async with anyio.create_task_group() as tg:
            for _ in range(500):
                tg.start_soon(call)
        took = time.monotonic() - began
        assert set(statuses) <= {200, 503} and statuses.count(200) >= console_module.MAX_CALLS
        assert took < 30, took
        assert (await site.api(http, "app_runs", bearer(TOKEN))).status_code == 200


async def test_a_burst_serves_exactly_max_calls_at_once(llm: FakeLLM, tmp_path: Path) -> None:
    """100 calls at once while the database is held, so that none can end: exactly MAX_CALLS are taken (and answered
    once it is let go), the others are refused at once with 503; then the places are free again."""
    statuses: list[int] = []
    limits = httpx2.Limits(max_connections=200, max_keepalive_connections=200)
    async with (
        served(llm, tmp_path, token=TOKEN) as site,
        httpx2.AsyncClient(timeout=WAIT, limits=limits) as http,
    ):
        assert (await site.api(http, "app_runs", bearer(TOKEN))).status_code == 200  # the database is made

        async def call() -> None:
            statuses.append((await site.api(http, "app_runs", bearer(TOKEN))).status_code)

        db = sqlite3.connect(tmp_path / "state.sqlite3", isolation_level=None)
        try:
            db.execute("begin immediate")  # every read of the console's waits for this (up to 10 s)
            async with anyio.create_task_group() as tg:
                for _ in range(100):
                    tg.start_soon(call)
                with anyio.fail_after(WAIT):
                    while len(statuses) < 100 - console_module.MAX_CALLS:
                        await anyio.sleep(0.01)  # polling the refusals, which come at once
                db.execute("commit")
        finally:
            if db.in_transaction:
                db.execute("commit")
            db.close()
        again = [(await site.api(http, "app_runs", bearer(TOKEN))).status_code for _ in range(3)]
    assert statuses.count(503) == 100 - console_module.MAX_CALLS
    assert statuses.count(200) == console_module.MAX_CALLS and again == [200] * 3


async def test_the_console_takes_exactly_the_app_tools_arguments(llm: FakeLLM) -> None:
    """Each console tool's arguments are the MCP app tool's: the same names, types, bounds and defaults."""

    def bare(schema: Any) -> Any:
        if isinstance(schema, dict):
            return {k: bare(v) for k, v in schema.items() if k not in ("title", "description")}
        return [bare(v) for v in schema] if isinstance(schema, list) else schema

    server = build_server(Settings(model=MODEL), {}, openai_env(llm))
    mcp_tools = {tool.name: tool for tool in await server.list_tools() if tool.name.startswith("app_")}
    assert set(mcp_tools) == set(TOOLS)
    for name, tool in TOOLS.items():
        ours = tool.arguments.model_json_schema()
        theirs = mcp_tools[name].input_schema
        assert bare(ours.get("properties", {})) == bare(theirs.get("properties", {})), name
        assert ours.get("required", []) == theirs.get("required", []), name


@pytest.mark.processes
def test_serve_prints_a_one_time_sign_in_link(llm: FakeLLM, tmp_path: Path) -> None:
    """`meta-agent serve --transport http` with META_AGENT_HTTP_TOKEN says one line more, on stderr: the link."""
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {}}))
    env = openai_env(
        llm,
        model=MODEL,
        base=os.environ,
        META_AGENT_HTTP_TOKEN=TOKEN,
        META_AGENT_CONVERSATIONS_DB=str(tmp_path / "state.sqlite3"),
    )
    with http_serving(config, env) as (url, log):
        log.wait_for("sign in to the web console")
        (line,) = [line for line in log.lines if "/ui/sign-in" in line]
        found = re.fullmatch(
            rf"meta-agent: sign in to the web console \(once, within 10 minutes\): ({url}/ui/sign-in\?code=[A-Za-z0-9_-]{{43}})\n",
            line,
        )
        assert found is not None, line
        assert TOKEN not in "".join(log.lines)
        with httpx2.Client(timeout=WAIT) as http:
            first = http.get(found[1])
            assert (first.status_code, first.headers["location"]) == (303, "/ui")
            cookie = {"Cookie": f"{SESSION_COOKIE}={cookie_attributes(first, SESSION_COOKIE)['value']}"}
            assert http.get(f"{url}/ui", headers=cookie).status_code == 200
            assert http.get(found[1]).status_code == 403
