"""No fetch reaches inward, and a data URL is sized before it is read (README, MCP tools: describe_image).

describe_image's URLs, image_gen's image URLs and every redirect they follow connect only to global addresses, or to
networks META_AGENT_FETCH_ALLOW_NETWORKS allows, whatever the spelling of the address. Real listeners on loopback count
what reaches them. Addresses of other networks are never contacted: there the connect seam (`anyio.connect_tcp`,
which httpcore's network backend calls) is replaced by one that records the attempt and connects nothing.
"""

from __future__ import annotations

import base64
import socket
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from counting_listener import CountingListener
from fake_llm import FakeLLM
from fault_server import TINY_PNG
from mcp import Client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse
from starlette.routing import Route
from threaded_web import ThreadedWeb

from meta_agent.config.settings import Settings, load_settings
from meta_agent.core.messages import ImagePart, ModelResponse, TextPart, ToolCall, ToolMessage
from meta_agent.core.tools import RunContext, ToolOutcome
from meta_agent.errors import ConfigError, ImageGenError
from meta_agent.front.server import build_server
from meta_agent.internal import internal_tools
from meta_agent.internal.describe_image import describe_image_tool
from meta_agent.providers.scripted import ScriptedProvider

pytestmark = [pytest.mark.anyio, pytest.mark.quick]

SET_IT = "; set META_AGENT_FETCH_ALLOW_NETWORKS to allow it"
# Spellings of this machine that the resolver takes: each reaches a listener on 127.0.0.1 (or ::1) unless refused.
LOOPBACK = {
    "127.0.0.1": "127.0.0.1 is a loopback address",
    "127.1": "127.1 resolves to 127.0.0.1, a loopback address",
    "127.0.1": "127.0.1 resolves to 127.0.0.1, a loopback address",
    "2130706433": "2130706433 resolves to 127.0.0.1, a loopback address",
    "0x7f000001": "0x7f000001 resolves to 127.0.0.1, a loopback address",
    "017700000001": "017700000001 resolves to 127.0.0.1, a loopback address",
    "0.0.0.0": "0.0.0.0 is an unspecified address",
    "localhost": "localhost resolves to {localhost}, a loopback address",
}
LOOPBACK_IPV6 = {
    "[::1]": "::1 is a loopback address",
    "[0:0:0:0:0:0:0:1]": "0:0:0:0:0:0:0:1 is a loopback address",
    "[::]": ":: is an unspecified address",
    "[::ffff:127.0.0.1]": "::ffff:127.0.0.1 is an IPv4-mapped form of 127.0.0.1, a loopback address",
    "[::ffff:7f00:1]": "::ffff:7f00:1 is an IPv4-mapped form of 127.0.0.1, a loopback address",
}
ALL_OF_LOOPBACK = "127.0.0.0/8,0.0.0.0/32,::/127"  # 127/8, 0.0.0.0, and :: with ::1
# Inside other networks: never contacted, by the old code either (the connect seam refuses all of them).
INWARD = {
    "http://169.254.169.254/latest/meta-data/iam/security-credentials/": (
        "169.254.169.254 is the cloud metadata address (link-local)"
    ),
    "http://0xa9fea9fe/latest/meta-data/": "0xa9fea9fe resolves to 169.254.169.254, the cloud metadata address "
    "(link-local)",
    "http://10.0.0.1/admin/delete?id=1": "10.0.0.1 is a private address",
    "http://172.16.0.1/x.png": "172.16.0.1 is a private address",
    "http://192.168.1.1/x.png": "192.168.1.1 is a private address",
    "http://100.64.0.1:8080/x.png": "100.64.0.1 is a shared (carrier-grade NAT) address",
    "http://[fd00::1]/x.png": "fd00::1 is a private address",
    "http://[fe80::1]/x.png": "fe80::1 is a link-local address",
    "http://[::ffff:169.254.169.254]/": "::ffff:169.254.169.254 is an IPv4-mapped form of 169.254.169.254, the cloud"
    " metadata address (link-local)",
    "http://[64:ff9b::a00:1]/x.png": "64:ff9b::a00:1 is a NAT64 form of 10.0.0.1, a private address",
    "http://[2002:a00:1::]/x.png": "2002:a00:1:: is a 6to4 form of 10.0.0.1, a private address",
    "http://224.0.0.1/x.png": "224.0.0.1 is a multicast address",
    "http://255.255.255.255/x.png": "255.255.255.255 is the broadcast address",
    "http://240.0.0.1/x.png": "240.0.0.1 is a reserved address",
}
DATA_SIZE = 100_000_000  # characters of the hostile data URLs: five times the cap's base64
FAST = 2.0  # seconds a refused 100 MB data URL may take, on a loaded machine (the old code took up to 10)
SPIKE = 10_000_000  # bytes the refusal may allocate at its peak: a tenth of the URL (the old code took 2 to 9 times it)
TOO_LARGE = "describe_image: the data URL's image is larger than 20,000,000 bytes"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def inner() -> Iterator[CountingListener]:
    with CountingListener() as listener:
        yield listener


def localhost_address() -> str:
    return str(socket.getaddrinfo("localhost", 80, type=socket.SOCK_STREAM)[0][4][0])


def spellings(listener: CountingListener) -> dict[str, str]:
    """The URL of each spelling of loopback at the listener's port, and why it is refused."""
    table = {**LOOPBACK, **(LOOPBACK_IPV6 if listener.ipv6 else {})}
    return {
        f"http://{host}:{listener.port}/x.png": why.format(localhost=localhost_address()) for host, why in table.items()
    }


async def described(urls: list[str], settings: Settings) -> dict[str, tuple[str, bool]]:
    """What describe_image answered, by URL, when a run's model asked it for each of `urls` in one turn, through our
    real server."""
    calls = tuple(ToolCall(id=f"c{i}", name="describe_image", arguments={"image": url}) for i, url in enumerate(urls))
    provider = ScriptedProvider([ModelResponse(tool_calls=calls), ModelResponse(text="done")])
    server = build_server(settings, {}, {}, provider=provider)
    async with Client(server) as client:
        with anyio.fail_after(60):
            result = await client.call_tool("agent", {"task": "look at these"})
    assert not result.is_error, result.content
    message = provider.requests[1].messages[-1]
    assert isinstance(message, ToolMessage)
    by_id = {r.call_id: (r.text, r.is_error) for r in message.results}
    return {url: by_id[f"c{i}"] for i, url in enumerate(urls)}


async def test_every_spelling_of_this_machine_is_refused_and_nothing_arrives(inner: CountingListener) -> None:
    refused = spellings(inner)
    told = await described(list(refused), Settings(model="scripted"))
    assert told == {url: (f"describe_image: refused {url}: {why}{SET_IT}", True) for url, why in refused.items()}
    assert inner.accepted == 0


async def test_the_allow_setting_lets_those_networks_through(inner: CountingListener) -> None:
    """META_AGENT_FETCH_ALLOW_NETWORKS set to the loopback networks: every spelling reaches the listener (which
    answers 404), once each."""
    urls = list(spellings(inner))
    told = await described(urls, Settings(model="scripted", fetch_allow_networks=ALL_OF_LOOPBACK))
    assert told == {url: (f"describe_image: {url} answered HTTP 404", True) for url in urls}
    assert inner.accepted == len(urls)


@pytest.fixture
def redirector(inner: CountingListener) -> Iterator[tuple[str, dict[str, str], CountingListener]]:
    """A web server on 127.0.0.1 whose /to/N redirects to the Nth of the targets below (those over IPv6 where this
    machine has it), each with why it is refused when only 127.0.0.1/32 is allowed; the last one is inside it.
    Nothing may arrive at the listeners: `inner`, and one on 127.0.0.2."""
    with CountingListener("127.0.0.2", also_ipv6=False) as other:
        targets = {
            f"http://127.0.0.2:{other.port}/x.png": "127.0.0.2 is a loopback address",
            f"http://0.0.0.0:{inner.port}/x.png": "0.0.0.0 is an unspecified address",
            f"http://2130706434:{other.port}/x.png": "2130706434 resolves to 127.0.0.2, a loopback address",
        }
        if inner.ipv6:
            targets[f"http://[::1]:{inner.port}/x.png"] = "::1 is a loopback address"
            targets[f"http://[::ffff:127.0.0.2]:{other.port}/x.png"] = (
                "::ffff:127.0.0.2 is an IPv4-mapped form of 127.0.0.2, a loopback address"
            )
        followed = f"http://2130706433:{inner.port}/x.png"  # 127.0.0.1 itself, allowed
        order = [*targets, followed]

        async def to(request: Request) -> RedirectResponse:
            return RedirectResponse(order[int(request.path_params["n"])], status_code=302)

        with ThreadedWeb(Starlette(routes=[Route("/to/{n}", to)])) as web:
            yield web.url, {**targets, followed: ""}, other


async def test_a_redirect_out_of_the_allowed_networks_is_refused(
    inner: CountingListener, redirector: tuple[str, dict[str, str], CountingListener]
) -> None:
    """Only 127.0.0.1/32 allowed: a redirect to any other address of this machine, in any spelling, is refused and
    nothing arrives there; a redirect to 127.0.0.1 in another spelling is followed."""
    web, targets, other = redirector
    urls = {f"{web}/to/{n}": target for n, target in enumerate(targets)}
    told = await described(list(urls), Settings(model="scripted", fetch_allow_networks="127.0.0.1/32"))
    expected = {
        url: (f"describe_image: refused {target} (where {url} redirects): {targets[target]}{SET_IT}", True)
        for url, target in urls.items()
    }
    last = list(urls)[-1]
    expected[last] = (f"describe_image: {last} answered HTTP 404", True)
    assert told == expected
    assert (other.accepted, inner.accepted) == (0, 1)  # only the redirect followed arrived


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every connection attempt httpcore makes, recorded and refused: nothing is sent anywhere."""
    attempts: list[tuple[str, int]] = []

    async def record(remote_host: str, remote_port: int, **_: Any) -> Any:
        attempts.append((remote_host, remote_port))
        raise OSError(f"the test connects nowhere ({remote_host})")

    monkeypatch.setattr(anyio, "connect_tcp", record)
    return attempts


async def test_addresses_inside_other_networks_are_refused_before_any_connect(connects: list[tuple[str, int]]) -> None:
    told = await described(list(INWARD), Settings(model="scripted"))
    assert told == {url: (f"describe_image: refused {url}: {why}{SET_IT}", True) for url, why in INWARD.items()}
    assert connects == []


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Names under .rebind.test, looked up (counted): `first` answers 127.0.0.1 once and 127.0.0.2 ever after (a
    rebinding name); any other 127.0.0.2. Names elsewhere resolve as they do."""
    real = socket.getaddrinfo
    lookups: dict[str, int] = {}

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)
        if not name.endswith(".rebind.test"):
            return real(host, port, *args, **kwargs)
        lookups[name] = lookups.get(name, 0) + 1
        here = name.startswith("first.") and lookups[name] == 1
        return real("127.0.0.1" if here else "127.0.0.2", port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return lookups


async def test_a_name_is_looked_up_once_and_the_address_checked_is_the_one_connected(
    inner: CountingListener, resolver: dict[str, int]
) -> None:
    """127.0.0.1/32 allowed. A name that resolves to 127.0.0.2 is refused, and nothing arrives there; a name that
    answers 127.0.0.1 and then 127.0.0.2 (DNS rebinding) is looked up once, and the connection goes to 127.0.0.1."""
    with CountingListener("127.0.0.2", also_ipv6=False) as other:
        urls = [f"http://inner.rebind.test:{other.port}/x.png", f"http://first.rebind.test:{inner.port}/x.png"]
        told = await described(urls, Settings(model="scripted", fetch_allow_networks="127.0.0.1/32"))
    why = "inner.rebind.test resolves to 127.0.0.2, a loopback address"
    assert told == {
        urls[0]: (f"describe_image: refused {urls[0]}: {why}{SET_IT}", True),
        urls[1]: (f"describe_image: {urls[1]} answered HTTP 404", True),
    }
    assert (other.accepted, inner.accepted) == (0, 1)
    assert resolver["first.rebind.test"] == 1


async def test_image_gen_fetches_no_image_url_inside_the_network_unless_allowed(
    llm: FakeLLM, inner: CountingListener
) -> None:
    """The images API answers with a URL on this machine: refused, and nothing arrives, until
    META_AGENT_FETCH_ALLOW_NETWORKS (through the settings, as a server makes its tools) allows it."""
    env = {"OPENAI_BASE_URL": f"{llm.url}/v1"}
    url = f"http://127.1:{inner.port}/cat.png"

    def image_gen(settings: Settings) -> Any:
        [tool] = [tool for tool in internal_tools(settings, env)[0] if tool.name == "image_gen"]
        return tool

    llm.reply({"created": 0, "data": [{"url": url}]})
    with pytest.raises(ImageGenError) as caught:
        await image_gen(Settings(image_model="openai:local")).run({"prompt": "a cat"})
    why = "127.1 resolves to 127.0.0.1, a loopback address"
    assert str(caught.value) == f"image_gen: openai:local answered with an image URL: refused {url}: {why}{SET_IT}"
    assert inner.accepted == 0
    llm.reply({"created": 0, "data": [{"url": url}]})
    with pytest.raises(ImageGenError) as caught:
        await image_gen(Settings(image_model="openai:local", fetch_allow_networks="127.0.0.0/8")).run({"prompt": "a"})
    assert str(caught.value) == f"image_gen: openai:local answered with an image URL: {url} answered HTTP 404"
    assert inner.accepted == 1


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("10.0.0.0/33", "'10.0.0.0/33' is not a network"),
        ("127.0.0.1/32,localhost", "'localhost' is not a network"),
        ("fd00::/129", "'fd00::/129' is not a network"),
    ],
)
def test_a_bad_network_is_a_config_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str, why: str
) -> None:
    monkeypatch.setenv("META_AGENT_FETCH_ALLOW_NETWORKS", value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert str(caught.value) == (
        f"META_AGENT_FETCH_ALLOW_NETWORKS: {why}; give CIDRs separated by commas, e.g. 127.0.0.1/32,10.0.0.0/8"
    )


def hostile_data_urls() -> Iterator[tuple[str, str]]:
    """100 MB data URLs, one at a time: plain base64, wrapped in lines as MIME wraps it, and wrapped with
    percent-escaped line breaks."""
    line = "QUJD" * 19  # 76 characters
    yield "plain", "data:image/png;base64," + "A" * DATA_SIZE
    yield "lines", "data:image/png;base64," + (line + "\r\n") * (DATA_SIZE // 78)
    yield "escaped lines", " data:image/png;base64," + (line + "%0A") * (DATA_SIZE // 79) + "\n"


async def test_a_100_mb_data_url_is_refused_at_once_without_a_memory_spike() -> None:
    run = describe_image_tool(None, {}).run
    assert run is not None
    context = RunContext(model=ScriptedProvider([]))  # never asked: the image is refused first
    for name, url in hostile_data_urls():
        tracemalloc.start()
        started = time.perf_counter()
        outcome = await run({"image": url}, context)
        took = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert (outcome.is_error, texts(outcome)) == (True, [TOO_LARGE]), name
        assert took < FAST and peak < SPIKE, (name, took, peak)
        del url


async def test_a_data_url_within_the_cap_is_read_in_any_of_those_forms() -> None:
    """Line breaks, percent-escaped ones and white space around the URL are skipped, as before."""
    encoded = base64.b64encode(TINY_PNG * 40).decode()
    wrapped = "\r\n".join(encoded[i : i + 76] for i in range(0, len(encoded), 76))
    provider = ScriptedProvider([ModelResponse(text="a red pixel")] * 3)
    run = describe_image_tool(None, {}).run
    assert run is not None
    for url in [
        f"data:image/png;base64,{encoded}",
        f"\n data:image/png;base64,{wrapped}\n",
        f"DATA:image/png;base64,{wrapped.replace(chr(13) + chr(10), '%0D%0A')}",
    ]:
        outcome = await run({"image": url}, RunContext(model=provider))
        assert (outcome.is_error, texts(outcome)) == (False, ["a red pixel"])
    sent = [part for request in provider.requests for part in request.messages[0].parts]  # type: ignore[union-attr]
    assert [base64.b64decode(part.data) for part in sent if isinstance(part, ImagePart)] == [TINY_PNG * 40] * 3


def texts(outcome: ToolOutcome) -> list[str]:
    return [part.text for part in outcome.parts if isinstance(part, TextPart)]
