"""The fault suite's hostile fetch group: a prompt-injected model asks describe_image for what is inside the network,
through the real front and the real openai SDK against the fake endpoint (tests/faults/test_faults.py describes the
suite).

hostile_fetch: in one turn the model names this machine in the spellings the resolver takes, redirects from an
allowed host to addresses outside the allowed network, the cloud metadata address and private, shared and unique
local addresses, and a data URL over the cap. Each is a one-line refusal the model reads and the run goes on to its
answer; the loopback listeners accept nothing, and no connection to another network is even attempted (the connect
seam, `anyio.connect_tcp`, lets through only this test's own loopback hosts and records any other).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest
from counting_listener import CountingListener
from fake_llm import FakeLLM
from fault_harness import (  # noqa: F401  (this module's fixtures)
    answer_with,
    call,
    finished,
    group,
    injecting,
    log_to_a_list,
    serving,
    told,
)
from fault_tally import TALLY
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse
from starlette.routing import Route
from threaded_web import ThreadedWeb

pytestmark = pytest.mark.anyio

GROUPS = {"hostile_fetch"}
TALLY.expected_groups |= GROUPS
CATEGORY = "hostile_input"

ALLOWED = "127.0.0.1/32"  # the redirecting host's network: what lies outside it is refused
# 127.0.0.2 as the resolver takes it: each reaches the listener there unless refused.
SPELLINGS = ["127.0.0.2", "127.2", "2130706434", "0x7f000002", "017700000002", "[::ffff:127.0.0.2]"]
INWARD = ["169.254.169.254", "0xa9fea9fe", "10.0.0.1", "192.168.1.1", "100.64.0.1", "[fd00::1]"]
DATA_URL_CHARS = 30_000_000  # over the cap's base64 (26,666,668 characters) and its room for line breaks
REFUSED = "describe_image: refused "
TOO_LARGE = "describe_image: the data URL's image is larger than 20,000,000 bytes"


@contextmanager
def only_loopback_connects(monkeypatch: pytest.MonkeyPatch, loopback: set[str]) -> Iterator[list[str]]:
    """Connections to `loopback` hosts go through; any other is recorded and refused, so nothing leaves."""
    real = anyio.connect_tcp
    attempts: list[str] = []

    async def connect(remote_host: Any, remote_port: int, **kwargs: Any) -> Any:
        if str(remote_host) in loopback:
            return await real(remote_host, remote_port, **kwargs)
        attempts.append(str(remote_host))
        raise OSError(f"the test connects nowhere outside loopback ({remote_host})")

    with monkeypatch.context() as patch:
        patch.setattr(anyio, "connect_tcp", connect)
        yield attempts


@contextmanager
def redirecting(targets: list[str]) -> Iterator[str]:
    """A web server on 127.0.0.1 whose /to/N redirects to targets[N]; its URL."""

    async def to(request: Request) -> RedirectResponse:
        return RedirectResponse(targets[int(request.path_params["n"])], status_code=302)

    with ThreadedWeb(Starlette(routes=[Route("/to/{n}", to)])) as web:
        yield web.url


async def test_hostile_fetch(llm: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    async with group("hostile_fetch", CATEGORY):
        with (
            CountingListener("127.0.0.2", also_ipv6=False) as inner,
            CountingListener("127.0.0.1") as here,
        ):
            redirects = [f"http://127.0.0.2:{inner.port}/x.png", f"http://0.0.0.0:{here.port}/x.png"]
            with redirecting(redirects) as web:
                urls = [
                    *(f"http://{host}:{inner.port}/x.png" for host in SPELLINGS),
                    *(f"{web}/to/{n}" for n in range(len(redirects))),
                    *(f"http://{host}/latest/meta-data/" for host in INWARD),
                    "data:image/png;base64," + "A" * DATA_URL_CHARS,
                ]
                loopback = {"127.0.0.1", "127.0.0.2", *(host.strip("[]") for host in SPELLINGS), "0.0.0.0"}
                async with injecting(CATEGORY, len(urls)) as faults:
                    with only_loopback_connects(monkeypatch, loopback) as attempts:
                        answers = await ask_for(llm, urls, tag="[hostile fetch]")
                    for url, answer in zip(urls, answers, strict=True):
                        expected = TOO_LARGE if url.startswith("data:") else REFUSED
                        assert answer.startswith(f"[error] {expected}") and "\n" not in answer, (url[:80], answer)
                        faults.handled()
        assert (inner.accepted, here.accepted, attempts) == (0, 0, [])


async def ask_for(llm: FakeLLM, urls: list[str], *, tag: str) -> list[str]:
    """What the model was told of describe_image for each of `urls`, asked in one turn of one run; the run ends with
    its answer."""
    calls = [(f"c{n}", "describe_image", {"image": url}) for n, url in enumerate(urls)]
    answer_with(llm, tag, *calls)
    async with serving(llm, {}, fetch_allow_networks=ALLOWED) as (client, _):
        finished(await call(client, "agent", {"task": f"look at these {tag}"}))
    results = told(llm, tag)
    return [results[f"c{n}"] for n in range(len(urls))]
