"""The browser the app tests drive: Debian's Chromium under Playwright (Playwright's own browser download is not
used). Missing Chromium, playwright or the npm packages skip these tests with the reason, and fail them under
CI=true, where scripts/test and .ci/run install them. (Fixtures for every test module, as conftest.py imports them;
the harness itself is fixtures/app_host.py.)"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.async_api import Browser


@pytest.fixture(scope="session")
def browser_ready() -> str:
    """The Chromium binary, once the host page is bundled; skips (fails under CI) when the tests cannot run."""
    from app_host import chromium_executable, host_script, why_no_browser

    reason = why_no_browser()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the browser tests cannot run under CI: {reason}")
        pytest.skip(reason)
    host_script()
    executable = chromium_executable()
    assert executable is not None
    return executable


@pytest.fixture(scope="module")
async def browser(browser_ready: str) -> AsyncIterator[Browser]:
    """One headless Chromium for a module's tests (module-scoped: the suite's anyio_backend is, and Playwright's
    objects belong to the event loop they were made on); each test opens its own context."""
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=browser_ready, headless=True)
        try:
            yield launched
        finally:
            await launched.close()
