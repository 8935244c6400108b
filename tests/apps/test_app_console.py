"""The same documents as the console's pages (/ui, /ui/tools, /ui/runs/<id>) in a real Chromium: the fetch bridge to
/ui/api/call, the runs list and its links, the theme from prefers-color-scheme. Routes in this process serve the
pages and answer the calls (fixtures/app_host.py), from the scripted stand-in for the app-only tools."""

from __future__ import annotations

import os

import pytest
from app_host import console_app
from app_server_double import RUN_ID, AppsServer, tool

try:
    from playwright.async_api import Browser, expect
except ImportError:  # the conftest's browser fixture says why, and fails under CI
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("Python's playwright is not installed", allow_module_level=True)

pytestmark = pytest.mark.anyio

OTHER_RUN = "01K0RUNBBBBBBBBBBBBBBBBBBB"

expect.set_options(timeout=10_000)


async def test_the_runs_list_links_each_run_to_its_page(browser: Browser) -> None:
    server = AppsServer()
    server.runs = [
        {"run_id": RUN_ID, "task": "what time is it?", "mode": "agent", "status": "running", "started": "2026-01-01"},
        {"run_id": OTHER_RUN, "task": "<b>bold</b>", "mode": "ask", "status": "done", "started": "2026-01-01"},
        {"run_id": "../../evil?x=1", "task": "forged", "mode": "ask", "status": "done", "started": "2026-01-01"},
    ]
    server.start()
    server.finish("It is noon.")
    async with console_app(browser, call_tool=server, color_scheme="dark") as console:
        page = console.page
        await page.goto("/ui")
        await expect(page.locator("html")).to_have_attribute("data-theme", "dark")
        await expect(page.get_by_role("link", name=OTHER_RUN)).to_have_attribute("href", f"/ui/runs/{OTHER_RUN}")
        await expect(page.get_by_text("live", exact=True)).to_have_count(1)
        await expect(page.get_by_text("<b>bold</b>", exact=True)).to_be_visible()
        await expect(page.get_by_text("../../evil?x=1", exact=True)).to_be_visible()
        await expect(page.get_by_role("link", name="../../evil?x=1")).to_have_count(0)
        await expect(page.get_by_role("link", name="Tools")).to_have_attribute("href", "/ui/tools")

        await page.get_by_role("link", name=RUN_ID).click()
        await expect(page.get_by_text("It is noon.")).to_be_visible()
        await expect(page.get_by_role("status")).to_have_text("done · answer")
        assert (await console.calls_made("app_run"))[0] == {"run_id": RUN_ID, "after": 0}
        for headers in console.call_headers:
            assert headers["content-type"] == "application/json"
            assert headers["x-meta-agent-ui"] == "1"
        assert console.errors == []


async def test_the_consoles_tools_page_sets_a_tool(browser: Browser) -> None:
    server = AppsServer()
    server.servers = [{"name": "time", "status": "ready", "reason": None, "tools": [tool("time.get_current_time")]}]
    async with console_app(browser, call_tool=server) as console:
        page = console.page
        await page.goto("/ui/tools")
        await expect(page.locator("html")).to_have_attribute("data-theme", "light")
        await page.get_by_role("combobox", name="trust for time.get_current_time").select_option("never")
        await expect(page.get_by_role("combobox", name="trust for time.get_current_time")).to_have_value("never")
        assert await console.calls_made("app_set_tool") == [{"name": "time.get_current_time", "trust": "never"}]
        await expect(page.get_by_role("link", name="Runs")).to_have_attribute("href", "/ui")
        assert console.errors == []


async def test_a_run_page_whose_address_names_no_run_says_so(browser: Browser) -> None:
    server = AppsServer()
    async with console_app(browser, call_tool=server) as console:
        await console.page.goto("/ui/runs/not-a-run")
        await expect(console.page.get_by_role("status")).to_have_text("This address names no run.")
        assert console.calls == []
