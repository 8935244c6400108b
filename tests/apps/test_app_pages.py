"""meta-agent's MCP Apps views in a real Chromium, hosted by the ext-apps SDK's AppBridge in a sandboxed iframe with a
strict CSP, against a scripted stand-in for the app-only tools (fixtures/app_server_double.py). Elements are found as a
user finds them: by role and accessible name, the names the apps contract promises."""

from __future__ import annotations

import os
from typing import Any

import pytest
from app_host import assemble, hosted_app, tool_error, tool_result
from app_server_double import RUN_ID, AppsServer, tool

try:
    from playwright.async_api import Browser, FrameLocator, expect
except ImportError:  # the conftest's browser fixture says why, and fails under CI
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("Python's playwright is not installed", allow_module_level=True)

pytestmark = pytest.mark.anyio

# A host's tools/call of `agent`: the run view finds its run by this JSON-RPC id.
AGENT_CALL = {"toolInfo": {"id": 7, "tool": {"name": "agent", "inputSchema": {"type": "object"}}}}
HOSTILE = (
    '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
    '<a href="javascript:window.__pwned=3">click me</a> \x1b[31mred\x1b[0m \u202eevil\u202c'
)
TEN_MB = 10 * 1024 * 1024

expect.set_options(timeout=10_000)


def status(frame: FrameLocator) -> Any:
    return frame.get_by_role("status").first


def a_first_step(server: AppsServer) -> None:
    server.add(
        "run_started",
        mode="agent",
        task="what time is it?",
        model="gpt-test",
        tools=["time.get_current_time", "read_result"],
        tool_count=2,
        unavailable=[{"server": "git", "reason": "failed to start: exit 1"}],
    )
    server.add("model_turn", 1, final=False)
    server.add("thinking", 1, text="The user wants the time in Paris.")
    server.add(
        "model_reply",
        1,
        text="Let me look at the clock.",
        tool_calls=["time.get_current_time"],
        input_tokens=600,
        output_tokens=40,
        duration_ms=812,
    )
    server.add(
        "tool_call", 1, call_id="c1", name="time.get_current_time", arguments={"timezone": "Europe/Paris"}, cut=False
    )
    server.add(
        "tool_result",
        1,
        call_id="c1",
        name="time.get_current_time",
        ok=True,
        duration_ms=15,
        error=None,
        text='{"datetime": "2026-01-01T12:00:00+01:00"}',
        images=0,
        cut=False,
    )


async def test_the_run_view_follows_its_run_to_the_end_without_a_tool_result(browser: Browser) -> None:
    server = AppsServer()
    async with hosted_app(browser, assemble("run"), call_tool=server, host_context=AGENT_CALL) as app:
        frame = app.frame
        await app.tool_input({"task": "what time is it?"})
        await expect(status(frame)).to_have_text("Waiting for the run to start…")
        server.start()
        a_first_step(server)
        await expect(status(frame)).to_have_text("running · step 1")
        await expect(frame.get_by_text("Let me look at the clock.")).to_be_visible()
        await expect(frame.get_by_text("time.get_current_time", exact=True)).to_be_visible()
        await expect(frame.get_by_text('"timezone": "Europe/Paris"')).to_be_visible()
        await expect(frame.get_by_text('{"datetime": "2026-01-01T12:00:00+01:00"}')).to_be_visible()
        await expect(frame.get_by_text("git: failed to start: exit 1")).to_be_visible()
        # the reasoning is there, collapsed, and opens on demand
        await expect(frame.get_by_text("The user wants the time in Paris.")).to_be_hidden()
        await frame.get_by_text("Reasoning", exact=True).click()
        await expect(frame.get_by_text("The user wants the time in Paris.")).to_be_visible()

        server.add("model_turn", 2, final=True)
        server.add("model_reply", 2, text="", tool_calls=[], input_tokens=600, output_tokens=305, duration_ms=900)
        server.finish("It is noon in Paris.")
        await expect(status(frame)).to_have_text("done · answer")
        await expect(frame.get_by_text("It is noon in Paris.")).to_be_visible()
        await expect(frame.get_by_text("2 model calls")).to_be_visible()
        await expect(frame.get_by_text("1,200 input tokens")).to_be_visible()
        await expect(frame.get_by_text("max steps 20")).to_be_visible()

        polls = app.calls_of("app_run")
        assert {"request_id": 7, "after": 0, "task": "what time is it?"} in polls
        assert polls[-1] == {"run_id": RUN_ID, "after": 6}  # once found, followed by its id from its cursor
        # done: no more polls, however long the view stays open
        count = server.polls
        await app.page.clock.fast_forward(120_000)
        await app.settle()
        assert server.polls == count
        assert app.errors == []
        assert [url for url in app.requests if not url.startswith(("about:", "data:"))] == []


async def test_a_tool_result_that_comes_first_still_shows_the_events(browser: Browser) -> None:
    server = AppsServer()
    server.start()
    a_first_step(server)
    server.finish("It is noon in Paris.")
    async with hosted_app(browser, assemble("run"), call_tool=server) as app:
        await app.tool_result(
            tool_result({"run_id": RUN_ID, "answer": "It is noon in Paris.", "stop_reason": "answer"})
        )
        await expect(status(app.frame)).to_have_text("done · answer")
        await expect(app.frame.get_by_text("Let me look at the clock.")).to_be_visible()
        await expect(app.frame.get_by_text("It is noon in Paris.")).to_be_visible()
        assert all(call["run_id"] == RUN_ID for call in app.calls_of("app_run"))


async def test_a_run_never_found_is_said_and_the_polling_stops(browser: Browser) -> None:
    server = AppsServer()
    async with hosted_app(browser, assemble("run"), call_tool=server, host_context=AGENT_CALL) as app:
        await expect(status(app.frame)).to_have_text("Waiting for the run to start…")
        await app.page.clock.fast_forward(31_000)
        await expect(status(app.frame)).to_have_text("No run found for this call.")
        count = server.polls
        assert 1 < count < 10  # backed off, never a tight loop
        await app.page.clock.fast_forward(120_000)
        await app.settle()
        assert server.polls == count


async def test_the_run_view_backs_off_when_polls_fail(browser: Browser) -> None:
    server = AppsServer()
    failing: list[int] = []

    async def unknown_run(name: str, arguments: dict[str, Any]) -> Any:
        if name == "app_run":
            failing.append(1)
            return tool_error("unknown run")
        return await server(name, arguments)

    async with hosted_app(browser, assemble("run"), call_tool=unknown_run) as app:
        await app.tool_result(tool_result({"run_id": RUN_ID}))
        await expect(status(app.frame)).to_have_text("unknown run (trying again)")
        for _ in range(6):
            await app.page.clock.fast_forward(16_000)
            await app.settle()
        await expect(status(app.frame)).to_have_text("Stopped following the run: unknown run")
        assert len(failing) == 6


async def test_approve_and_deny_answer_the_pending_approvals_by_key(browser: Browser) -> None:
    server = AppsServer()
    server.start()
    server.add("tool_call", 1, call_id="c1", name="git.git_commit", arguments={"message": "fix"}, cut=False)
    server.add("approval_requested", 1, call_id="c1", name="git.git_commit", arguments={"message": "fix"})
    server.pending = [{"key": "a1", "name": "git.git_commit", "arguments": {"message": "fix"}, "step": 1}]
    async with hosted_app(browser, assemble("run"), call_tool=server, host_context=AGENT_CALL) as app:
        frame = app.frame
        await frame.get_by_role("button", name="Approve").click()
        await expect(frame.get_by_text("allowed once")).to_be_visible()
        await expect(frame.get_by_role("button", name="Approve")).to_have_count(0)
        assert app.calls_of("app_answer") == [{"run_id": RUN_ID, "key": "a1", "decision": "approve"}]

        server.pending = [{"key": "a2", "name": "git.git_push", "arguments": {}, "step": 2}]
        server.add("approval_answered", 1, call_id="c1", name="git.git_commit", allowed=True, answer="allowed once")
        await expect(frame.get_by_text("Approved: allowed once")).to_be_visible()
        await frame.get_by_role("button", name="Deny").click()
        await expect(frame.get_by_text("denied", exact=True)).to_be_visible()
        assert app.calls_of("app_answer")[-1] == {"run_id": RUN_ID, "key": "a2", "decision": "deny"}

        server.pending = [{"key": "a3", "name": "git.git_push", "arguments": {}, "step": 3}]
        server.answer_errors["a3"] = "already answered"
        await frame.get_by_role("button", name="Approve").click()
        await expect(frame.get_by_text("already answered")).to_be_visible()
        await expect(frame.get_by_role("button", name="Approve")).to_be_enabled()
        server.pending = []
        await expect(frame.get_by_role("button", name="Approve")).to_have_count(0)
        assert app.errors == []


def a_toolbox(server: AppsServer) -> None:
    server.mode = "plan"
    server.internal = [tool("read_result", read_only=True, trust="always", trust_default="always")]
    server.servers = [
        {"name": "time", "status": "ready", "reason": None, "tools": [tool("time.get_current_time", read_only=True)]},
        {
            "name": "git",
            "status": "failed",
            "reason": "exit 1: git not found",
            "tools": [
                tool(
                    "git.git_commit",
                    available=False,
                    why_unavailable="the server failed",
                    locked=True,
                    trust="never",
                    description=HOSTILE,
                )
            ],
        },
    ]
    server.problems = ["servers.json: git: command not found"]


async def test_the_tool_selector_sets_tools_trust_and_mode(browser: Browser) -> None:
    server = AppsServer()
    a_toolbox(server)
    async with hosted_app(browser, assemble("tools"), call_tool=server) as app:
        frame = app.frame
        time_box = frame.get_by_role("checkbox", name="time.get_current_time")
        await expect(time_box).to_be_checked()
        await time_box.uncheck()
        await expect(time_box).not_to_be_checked()
        trust = frame.get_by_role("combobox", name="trust for time.get_current_time")
        await expect(trust).to_have_value("ask")
        await trust.select_option("always")
        await expect(trust).to_have_value("always")
        # the keyboard reaches the toggles
        internal = frame.get_by_role("checkbox", name="read_result")
        await internal.focus()
        await internal.press("Space")
        await expect(internal).not_to_be_checked()
        await app.settle()  # a box changes at once; its call is on its way
        assert app.calls_of("app_set_tool") == [
            {"name": "time.get_current_time", "enabled": False},
            {"name": "time.get_current_time", "trust": "always"},
            {"name": "read_result", "enabled": False},
        ]

        locked = frame.get_by_role("combobox", name="trust for git.git_commit")
        await expect(locked).to_be_disabled()
        await expect(locked).to_have_value("never")
        await expect(frame.get_by_text("Trust locked: the operator set it to never.")).to_be_visible()
        await expect(frame.get_by_text("Unavailable: the server failed")).to_be_visible()
        await expect(frame.get_by_text("exit 1: git not found")).to_be_visible()
        await expect(frame.get_by_text("servers.json: git: command not found")).to_be_visible()
        await expect(frame.get_by_text("read-only")).to_have_count(2)
        await expect(frame.get_by_text("failed", exact=True)).to_be_visible()
        await expect(frame.get_by_text('<img src=x onerror="window.__pwned=1">', exact=False)).to_be_visible()

        mode = frame.get_by_role("combobox", name="mode")
        await expect(mode).to_have_value("plan")
        await mode.select_option("ask")
        await expect(frame.get_by_role("status")).to_have_text("Mode: ask")
        assert app.calls_of("app_set_mode") == [{"mode": "ask"}]
        assert await app.frame_eval("window.__pwned") is None


async def test_a_refused_change_is_shown_and_undone(browser: Browser) -> None:
    server = AppsServer()
    a_toolbox(server)
    server.set_tool_errors["time.get_current_time"] = "time.get_current_time: no such tool"
    async with hosted_app(browser, assemble("tools"), call_tool=server) as app:
        box = app.frame.get_by_role("checkbox", name="time.get_current_time")
        await box.click()
        await expect(app.frame.get_by_role("alert")).to_have_text("Not changed: time.get_current_time: no such tool")
        await expect(box).to_be_checked()


async def test_the_task_box_starts_a_run_and_shows_it_in_place(browser: Browser) -> None:
    server = AppsServer()
    a_toolbox(server)
    async with hosted_app(browser, assemble("tools"), call_tool=server) as app:
        frame = app.frame
        await expect(frame.get_by_role("combobox", name="mode")).to_have_value("plan")
        await frame.get_by_role("button", name="Start").click()
        await expect(frame.get_by_role("status")).to_have_text("Write a task first.")
        assert app.calls_of("app_start") == []
        await frame.get_by_role("textbox", name="task").fill("list the files")
        await frame.get_by_role("button", name="Start").click()
        await expect(frame.get_by_role("heading", name="meta-agent run")).to_be_visible()
        assert app.calls_of("app_start") == [{"task": "list the files", "mode": "plan"}]
        server.add("model_reply", 1, text="Listing.", tool_calls=[], input_tokens=1, output_tokens=1, duration_ms=1)
        server.finish("Three files.")
        await expect(status(frame)).to_have_text("done · answer")
        await expect(frame.get_by_text("Three files.")).to_be_visible()
        assert app.calls_of("app_run")[0] == {"run_id": RUN_ID, "after": 0}
        await frame.get_by_role("button", name="Back to tools").click()
        await expect(frame.get_by_role("checkbox", name="time.get_current_time")).to_be_visible()


async def test_hostile_text_stays_text(browser: Browser) -> None:
    server = AppsServer()
    server.start(task=HOSTILE)
    server.add("thinking", 1, text=HOSTILE)
    server.add(
        "model_reply",
        1,
        text=HOSTILE + " [x](javascript:window.__pwned=4)",
        tool_calls=[],
        input_tokens=1,
        output_tokens=1,
        duration_ms=1,
    )
    server.add("tool_call", 1, call_id="c1", name="evil.<b>tool</b>", arguments={"html": HOSTILE}, cut=False)
    big = HOSTILE + "x" * TEN_MB
    server.add(
        "tool_result",
        1,
        call_id="c1",
        name="evil.<b>tool</b>",
        ok=True,
        duration_ms=1,
        error=None,
        text=big,
        images=0,
        cut=False,
    )
    server.add("tool_call", 1, call_id="c2", name="evil.fail", arguments="{cut", cut=True)
    server.add(
        "tool_result",
        1,
        call_id="c2",
        name="evil.fail",
        ok=False,
        duration_ms=1,
        error=HOSTILE,
        text="",
        images=0,
        cut=False,
    )
    server.finish(HOSTILE)
    async with hosted_app(browser, assemble("run"), call_tool=server) as app:
        frame = app.frame
        await app.tool_result(tool_result({"run_id": RUN_ID}))
        await expect(status(frame)).to_have_text("done · answer")
        await expect(frame.get_by_text("evil.<b>tool</b>", exact=True)).to_be_visible()
        literal = frame.get_by_text('<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>')
        assert await literal.count() >= 5
        await expect(frame.get_by_text("␛[31mred␛[0m \\u202Eevil\\u202C").first).to_be_visible()
        await frame.get_by_text("click me").filter(visible=True).first.click()
        shown = len(big) + 2 * len("\\u202E") - 2  # each bidi control is shown as its 6-character escape
        await expect(frame.get_by_text(f"{shown - 100_000:,} of {shown:,} characters not shown.")).to_be_visible()
        await frame.get_by_role("button", name="Show 100,000 more characters").click()
        await expect(frame.get_by_text(f"{shown - 200_000:,} of {shown:,} characters not shown.")).to_be_visible()
        longest = await app.frame_eval(
            "Math.max(...[...document.querySelectorAll('pre')].map(p => p.textContent.length))"
        )
        assert longest == 200_000
        assert await app.frame_eval("window.__pwned") is None
        assert await app.frame_eval("document.querySelectorAll('img, iframe, object, embed, a[href]').length") == 0
        assert await app.frame_eval("document.scripts.length") == 1
        assert app.opened_links == []
        assert app.errors == []


async def test_the_view_follows_the_hosts_theme_and_styles_and_says_its_size(browser: Browser) -> None:
    server = AppsServer()
    a_toolbox(server)
    context = {"theme": "dark", "styles": {"variables": {"--color-background-primary": "rgb(1, 2, 3)"}}}
    async with hosted_app(browser, assemble("tools"), call_tool=server, host_context=context) as app:
        html = app.frame.locator("html")
        await expect(html).to_have_attribute("data-theme", "dark")
        await expect(app.frame.locator("body")).to_have_css("background-color", "rgb(1, 2, 3)")
        await app.set_theme("light")
        await expect(html).to_have_attribute("data-theme", "light")
        await expect(app.frame.get_by_role("checkbox", name="read_result")).to_be_visible()
        await app.page.wait_for_function("window.host.state.sizes.some(size => size.height > 300)")
        assert app.errors == []
