"""describe_image: runs whose model calls it, with the fake model endpoint as the vision model through the real
openai SDK, images served over real HTTP on 127.0.0.1, and an image a real child tool returned earlier in the run."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import fault_entry, openai_env
from fake_llm import FakeLLM, Seen, error_body, openai_reply
from fault_server import TINY_PNG
from mcp import Client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.routing import Route
from threaded_web import ThreadedWeb

from meta_agent.config.settings import Settings, load_settings
from meta_agent.core.limits import Limits
from meta_agent.core.loop import RunRequest, run
from meta_agent.core.messages import ModelResponse, ToolCall, ToolMessage
from meta_agent.engine import Engine
from meta_agent.front.server import build_server
from meta_agent.internal import LEFT_OUT, internal_tools
from meta_agent.internal.describe_image import DEFAULT_QUESTION, SYSTEM, describe_image_tool
from meta_agent.internal.images import FetchLimits
from meta_agent.providers.scripted import ScriptedProvider
from meta_agent.shared.addresses import parse_networks
from meta_agent.toolbox.build import Toolbox, ToolCaller

pytestmark = pytest.mark.anyio

JPEG = b"\xff\xd8\xff\xe0" + b"a tiny jpeg" * 3
GIF = b"GIF89a" + b"a tiny gif" * 3
CAP = 1000  # the size cap of the refusal tests' tool
SET_IT = "set META_AGENT_VISION_MODEL to a model that takes images (e.g. openai:gpt-5.5)"
# The image host's network: a fetch from inside the network is refused unless META_AGENT_FETCH_ALLOW_NETWORKS allows it.
IMAGE_HOST_NETWORK = "127.0.0.1/32"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


class ImageHost:
    """A web server on 127.0.0.1 (on a thread) with images, pages that are not images, redirects and a URL that
    never answers until the client goes away."""

    def __init__(self) -> None:
        big = b"\x89PNG\r\n\x1a\n" + b"x" * (CAP * 5)

        async def stream(_request: Request) -> StreamingResponse:
            chunks = (big[i : i + 100] for i in range(0, len(big), 100))  # no content-length: the cap counts
            return StreamingResponse(chunks, media_type="image/png")

        async def hang(request: Request) -> Response:
            while (await request.receive())["type"] != "http.disconnect":
                pass
            return Response(b"", media_type="image/png")

        async def redirect(request: Request) -> RedirectResponse:
            hops = int(request.path_params["hops"])
            return RedirectResponse(f"/redirect/{hops - 1}" if hops > 1 else "/photo.jpg", status_code=302)

        def fixed(body: bytes, media_type: str, status: int = 200, **headers: str) -> Any:
            async def answer(_request: Request) -> Response:
                return Response(body, status_code=status, media_type=media_type, headers=headers)

            return answer

        routes = [
            Route("/photo.jpg", fixed(JPEG, "image/jpeg")),
            Route("/page", fixed(b"<html>not an image</html>", "text/html")),
            Route("/big.png", fixed(big, "image/png")),
            Route("/missing.png", fixed(b"gone", "text/plain", 404)),
            Route("/to-file", fixed(b"", "text/plain", 302, location="file:///etc/passwd")),
            Route("/big-stream.png", stream),
            Route("/hang.png", hang),
            Route("/redirect/{hops}", redirect),
        ]
        self._web = ThreadedWeb(Starlette(routes=routes))
        self.url = self._web.url

    def __enter__(self) -> ImageHost:
        self._web.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._web.__exit__()


@pytest.fixture(scope="module")
def host() -> Iterator[ImageHost]:
    with ImageHost() as serving:
        yield serving


def data_url(raw: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(raw).decode()}"


def describe(call_id: str, image: str, question: str | None = None) -> tuple[str, str, dict[str, str]]:
    """A call of describe_image as the fake endpoint's reply carries it."""
    return call_id, "describe_image", {"image": image, **({"question": question} if question else {})}


def vision_requests(llm: FakeLLM) -> list[Seen]:
    """The requests describe_image sent: the ones with its system text."""
    return [seen for seen in llm.requests if seen.body["messages"][0] == {"role": "system", "content": SYSTEM}]


def asked(seen: Seen) -> tuple[str, bytes, str]:
    """What one vision request asked: the image's media type and bytes, and the question."""
    [user] = seen.body["messages"][1:]
    image, question = user["content"]
    header, _, data = image["image_url"]["url"].partition(",")
    return header.removeprefix("data:").removesuffix(";base64"), base64.b64decode(data), question["text"]


def tool_texts(seen: Seen) -> dict[str, str]:
    """The first line of each tool result a chat request carries, by call id (the provider adds a line where images
    follow)."""
    return {m["tool_call_id"]: m["content"].splitlines()[0] for m in seen.body["messages"] if m["role"] == "tool"}


async def test_the_run_model_describes_a_child_image_a_data_url_and_a_served_image(
    llm: FakeLLM, host: ImageHost
) -> None:
    """No META_AGENT_VISION_MODEL: the run's own model, which takes images, is asked, once per image, with the
    image's bytes and the question; each answer goes back to the model as the tool's result."""
    settings = Settings(model="openai:run-model", fetch_allow_networks=IMAGE_HOST_NETWORK)
    server = build_server(settings, {"f": fault_entry()}, openai_env(llm))
    llm.reply(openai_reply(None, ("c1", "f__image", {})))
    calls = [
        describe("d1", "image-1", "Which colour is the child's image?"),
        describe("d2", data_url(GIF, "image/png"), "What does the inline image say?"),
        describe("d3", f"{host.url}/redirect/2"),  # two redirects, then /photo.jpg
    ]
    llm.reply(openai_reply(None, *calls))
    llm.reply(openai_reply("a red pixel"), match="Which colour")
    llm.reply(openai_reply("it says hello"), match="What does the inline")
    llm.reply(openai_reply("a photo of a cat"), match=DEFAULT_QUESTION)
    llm.reply(openai_reply("All three described."))
    async with Client(server) as client:
        result = await client.call_tool("agent", {"task": "look at the images", "tools": ["f.image", "describe_*"]})
    assert not result.is_error, result.content
    assert result.structured_content and result.structured_content["answer"] == "All three described."
    by_question = {}
    for seen in vision_requests(llm):
        mime, raw, question = asked(seen)
        by_question[question] = (mime, raw, seen.body["model"])
    assert by_question == {
        "Which colour is the child's image?": ("image/png", TINY_PNG, "run-model"),
        "What does the inline image say?": ("image/gif", GIF, "run-model"),  # its bytes say GIF, whatever the URL said
        DEFAULT_QUESTION: ("image/jpeg", JPEG, "run-model"),
    }
    first_result, last = tool_texts(llm.requests[1]), llm.requests[-1]
    assert first_result["c1"] == f"[image-1: image/png, {len(TINY_PNG)} bytes]"
    assert tool_texts(last) == {
        "c1": first_result["c1"],
        "d1": "a red pixel",
        "d2": "it says hello",
        "d3": "a photo of a cat",
    }


async def test_a_vision_model_set_is_asked_for_a_run_model_without_image_input(
    llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """META_AGENT_VISION_MODEL names another model: it gets the image; the run's model, which cannot take images, saw
    only the placeholder with the image's reference. A reference the run never gave is refused, and so is a vision
    model that fails: both one-line errors, and the run goes on."""
    monkeypatch.setenv("META_AGENT_VISION_MODEL", "openai:vision-model")
    settings = load_settings()
    script = [
        reply(call("c1", "f__image")),
        reply(call("d1", "describe_image", image="image-1", question="What is it?")),
        reply(call("d2", "describe_image", image="image-7"), call("d3", "describe_image", image="image-1")),
        reply(text="done"),
    ]
    provider = ScriptedProvider(script, accepts_images=False)
    server = build_server(settings, {"f": fault_entry()}, openai_env(llm), provider=provider)
    llm.reply(openai_reply("one red pixel"))
    llm.reply(error_body("image too small to see"), status=400)
    async with Client(server) as client:
        result = await client.call_tool("agent", {"task": "what did f.image make?"})
    assert not result.is_error, result.content
    [placeholder] = results_of(provider, 1).values()
    assert placeholder == (f"[image-1: image/png, {len(TINY_PNG)} bytes, not shown]", False)
    [seen, failed] = vision_requests(llm)
    assert seen.body["model"] == failed.body["model"] == "vision-model"
    assert asked(seen) == ("image/png", TINY_PNG, "What is it?")
    assert results_of(provider, 2) == {"d1": ("one red pixel", False)}
    unknown, refused = results_of(provider, 3).values()
    assert unknown == ("describe_image: there is no image-7; this run's images are image-1", True)
    assert refused[1] and "image too small to see" in refused[0] and "\n" not in refused[0]


@pytest.mark.quick
async def test_what_describe_image_refuses_is_one_line_each(host: ImageHost) -> None:
    """Other URL schemes, pages that are not images, images over the cap (with a content length or without), a fetch
    past the time limit, a redirect to a file: URL or too many redirects, malformed data URLs and unknown
    references: each a one-line error, before any model is asked."""
    refused = {
        "file:///etc/passwd": "file: URLs are not accepted; give an http(s) or data:image URL, or a reference like "
        "image-1",
        "ftp://127.0.0.1/a.png": "ftp: URLs are not accepted; give an http(s) or data:image URL, or a reference like "
        "image-1",
        f"{host.url}/page": f"{host.url}/page is text/html, not an image",
        f"{host.url}/missing.png": f"{host.url}/missing.png answered HTTP 404",
        f"{host.url}/big.png": f"{host.url}/big.png is larger than 1,000 bytes (5,008)",
        f"{host.url}/big-stream.png": f"{host.url}/big-stream.png is larger than 1,000 bytes",
        f"{host.url}/hang.png": f"fetching {host.url}/hang.png took longer than 1 s",
        f"{host.url}/to-file": f"{host.url}/to-file redirects to file:///etc/passwd, which is not an http(s) URL",
        f"{host.url}/redirect/3": f"{host.url}/redirect/3 redirects more than 2 times",
        data_url(b"hello", "text/plain"): "the data URL holds text/plain, not an image (data:image/png;base64,...)",
        "data:image/png,rawbytes": "only base64 data URLs are accepted (data:image/png;base64,...)",
        "data:image/png;base64,@@@@": "the data URL's base64 is malformed",
        data_url(b"x" * (CAP + 1), "image/png"): "the data URL's image is larger than 1,000 bytes",
        "image-3": "there is no image-3: no tool result of this run has returned an image",
        "a cat picture": "'a cat picture' is neither an http(s) or data:image URL nor a reference like image-1 to an "
        "image of this run",
    }
    limits = FetchLimits(
        max_bytes=CAP, timeout=1.0, max_redirects=2, allowed_networks=parse_networks(IMAGE_HOST_NETWORK)
    )
    tool = describe_image_tool(None, {}, limits=limits)
    calls = [ToolCall(id=f"c{i}", name="describe_image", arguments={"image": url}) for i, url in enumerate(refused)]
    provider = ScriptedProvider([ModelResponse(tool_calls=tuple(calls)), ModelResponse(text="none of them")])
    tools = tuple(Toolbox.build([tool], []).select())
    request = RunRequest(task="t", mode="agent", tools=tools, limits=Limits(max_tool_calls_per_step=len(calls)))
    result = await run(request, provider=provider, tools=ToolCaller({}, [tool]))
    assert result.answer == "none of them"
    told = {call_id: text for call_id, (text, is_error) in results_of(provider, 1).items() if is_error}
    assert told == {f"c{i}": f"describe_image: {why}" for i, why in enumerate(refused.values())}
    assert len(provider.requests) == 2  # no vision request: the run's scripted model was asked twice, for its turns


@pytest.mark.parametrize(
    ("vision_model", "accepts_images", "why"),
    [
        (None, False, f"the run's model scripted does not take images: {SET_IT}"),
        ("gemini:gemini-2.5-flash", True, "META_AGENT_VISION_MODEL=gemini:gemini-2.5-flash cannot be used: "),
    ],
)
@pytest.mark.quick
async def test_no_model_that_takes_images_is_a_tool_error_saying_what_to_set(
    vision_model: str | None, accepts_images: bool, why: str
) -> None:
    tool = describe_image_tool(vision_model, {})
    script = [ModelResponse(tool_calls=(ToolCall(id="c1", name="describe_image", arguments={"image": "image-1"}),))]
    provider = ScriptedProvider([*script, ModelResponse(text="ok")], accepts_images=accepts_images)
    request = RunRequest(task="t", mode="agent", tools=tuple(Toolbox.build([tool], []).select()))
    await run(request, provider=provider, tools=ToolCaller({}, [tool]))
    [(text, is_error)] = results_of(provider, 1).values()
    assert is_error and text.startswith(f"describe_image: {why}") and "\n" not in text
    if vision_model is not None:
        assert "GEMINI_API_KEY" in text


async def test_images_of_an_earlier_turn_keep_their_references(llm: FakeLLM) -> None:
    """A conversation's next run counts its images on from the last one's, and can still describe those the model
    saw: a reference never names two images."""
    server = build_server(Settings(model="openai:run-model"), {"f": fault_entry()}, openai_env(llm))
    async with Client(server) as client:
        llm.reply(openai_reply(None, ("c1", "f__image", {})))
        llm.reply(openai_reply("made one"))
        first = await client.call_tool("agent", {"task": "make an image"})
        assert first.structured_content is not None
        conversation = first.structured_content["conversation_id"]
        llm.reply(openai_reply(None, ("c2", "f__image", {}), describe("d1", "image-1", "And the first one?")))
        llm.reply(openai_reply("the first image is red"), match="And the first one?")
        llm.reply(openai_reply("both seen"))
        second = await client.call_tool("agent", {"task": "again", "conversation_id": conversation})
    assert second.structured_content and second.structured_content["answer"] == "both seen"
    texts = tool_texts(llm.requests[-1])
    assert (texts["c1"], texts["c2"]) == (
        f"[image-1: image/png, {len(TINY_PNG)} bytes]",
        f"[image-2: image/png, {len(TINY_PNG)} bytes]",
    )
    assert texts["d1"] == "the first image is red"
    [seen] = vision_requests(llm)
    assert asked(seen) == ("image/png", TINY_PNG, "And the first one?")


async def test_describe_image_is_offered_selected_and_withheld_like_image_gen(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read-only, so plan mode sees it; `tools` patterns select it; META_AGENT_INTERNAL_TOOLS can leave it out, and a
    META_AGENT_VISION_MODEL that names no model withholds it: the toolbox says why."""
    offered, withheld = internal_tools(Settings(), {})
    assert "describe_image" in [tool.name for tool in offered] and "describe_image" not in withheld
    box = Toolbox.build(offered, [])
    assert "describe_image" in [spec.name for spec in box.select(mode="plan")]
    assert [spec.name for spec in box.select(["describe_*"])] == ["describe_image"]
    for setting, why in [
        ({"META_AGENT_INTERNAL_TOOLS": "image_gen"}, LEFT_OUT),
        (
            {"META_AGENT_VISION_MODEL": "gpt-5.5"},
            "META_AGENT_VISION_MODEL='gpt-5.5' is not one provider:model (openai:, anthropic:, ollama: or gemini:,"
            " e.g. openai:gpt-5.5)",
        ),
        (
            {"META_AGENT_VISION_MODEL": "openai:a,ollama:b"},
            "META_AGENT_VISION_MODEL='openai:a,ollama:b' is not one provider:model (openai:, anthropic:, ollama: or"
            " gemini:, e.g. openai:gpt-5.5)",
        ),
    ]:
        for name, value in setting.items():
            monkeypatch.setenv(name, value)
        async with Engine(load_settings(), {}, {}) as engine:
            tools = {tool["name"]: tool for tool in engine.toolbox.describe()["tools"]}
            assert "describe_image" not in [spec.name for spec in engine.toolbox().select()]
        assert (tools["describe_image"]["enabled"], tools["describe_image"]["withheld"]) == (False, why)
        for name in setting:
            monkeypatch.delenv(name)


def call(call_id: str, name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


def reply(*calls: ToolCall, text: str = "") -> ModelResponse:
    return ModelResponse(text=text, tool_calls=calls)


def results_of(provider: ScriptedProvider, turn: int) -> dict[str, tuple[str, bool]]:
    """The tool results the scripted model was sent at its `turn` (0 the first), by call id."""
    message = provider.requests[turn].messages[-1]
    assert isinstance(message, ToolMessage), message
    return {result.call_id: (result.text, result.is_error) for result in message.results}
