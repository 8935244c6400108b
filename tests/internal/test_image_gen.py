"""image_gen: the real openai SDK over real HTTP to a fake images endpoint on 127.0.0.1."""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from conftest import openai_env
from fake_llm import FakeLLM, anthropic_reply, error_body, images_reply, openai_reply
from fault_server import TINY_PNG
from mcp import Client
from structlog.testing import capture_logs

from meta_agent.config.settings import Settings
from meta_agent.core.messages import ImagePart, TextPart
from meta_agent.errors import ImageGenError, ProviderAuthError, ProviderBadRequest, ProviderUnavailable
from meta_agent.front.server import build_server
from meta_agent.internal import INTERNAL_TOOLS
from meta_agent.internal.describe_image import DESCRIBE_IMAGE
from meta_agent.internal.image_gen import IMAGE_GEN, WHAT_TO_SET, image_gen_tool, image_gen_withheld
from meta_agent.internal.images import FetchLimits
from meta_agent.internal.read_result import READ_RESULT

pytestmark = [pytest.mark.anyio, pytest.mark.quick]
FAST_RETRY = {"retry_after_ms": "1"}  # the SDK honours retry-after-ms, so its retries take no time
PNG = base64.b64encode(TINY_PNG).decode()
GPT_IMAGE = "openai:gpt-image-1"
ONE_TO_TEN = "an integer from 1 to 10"
ANY_SIZE = "WIDTHxHEIGHT (positive integers) or auto"
LONG_PROMPT = "a lighthouse on a cliff at dusk, " * 4
# What META_AGENT_FETCH_ALLOW_NETWORKS=127.0.0.1/32 gives: the images served on 127.0.0.1 here may be fetched.
LOOPBACK_ALLOWED = FetchLimits(allowed_networks=Settings(fetch_allow_networks="127.0.0.1/32").fetch_networks())


async def test_two_images_over_http(llm: FakeLLM) -> None:
    llm.reply(images_reply(PNG, PNG))
    tool = image_gen_tool("openai:gpt-image-1", openai_env(llm))
    outcome = await tool.run({"prompt": "a cat", "size": "1024x1024", "n": 2})
    [seen] = llm.requests
    assert seen.path == "/v1/images/generations"
    assert seen.headers["authorization"] == "Bearer sk-test"
    assert seen.body == {"model": "gpt-image-1", "prompt": "a cat", "size": "1024x1024", "n": 2}
    assert not outcome.is_error
    assert outcome.parts == (
        TextPart(text='generated 2 images (1024x1024) for "a cat"'),
        ImagePart(data=PNG, mime_type="image/png"),
        ImagePart(data=PNG, mime_type="image/png"),
    )
    assert all(base64.b64decode(part.data).startswith(b"\x89PNG\r\n\x1a\n") for part in outcome.parts[1:])


@pytest.mark.parametrize(
    ("image_model", "arguments", "body", "summary"),
    [
        (
            "openai:gpt-image-1",
            {"prompt": "a cat"},
            {"model": "gpt-image-1", "prompt": "a cat", "n": 1},
            'generated 1 image for "a cat"',
        ),
        (
            "openai:dall-e-3",
            {"prompt": "a cat", "size": "1792x1024"},
            {"model": "dall-e-3", "prompt": "a cat", "n": 1, "size": "1792x1024", "response_format": "b64_json"},
            'generated 1 image (1792x1024) for "a cat"',
        ),
        (
            "openai:local-diffusion",
            {"prompt": LONG_PROMPT, "size": "640x480"},
            {"model": "local-diffusion", "prompt": LONG_PROMPT, "n": 1, "size": "640x480"},
            f'generated 1 image (640x480) for "{LONG_PROMPT[:79]}…"',
        ),
    ],
)
async def test_request_shape_per_model(
    llm: FakeLLM, image_model: str, arguments: dict[str, Any], body: dict[str, Any], summary: str
) -> None:
    llm.reply(images_reply(PNG))
    outcome = await image_gen_tool(image_model, openai_env(llm)).run(arguments)
    assert llm.requests[0].body == body  # DALL·E is asked for base64; GPT image models refuse that parameter
    assert outcome.parts[0] == TextPart(text=summary)


async def test_a_local_server_needs_no_key(llm: FakeLLM) -> None:
    llm.reply(images_reply(PNG))
    outcome = await image_gen_tool("openai:gpt-image-1", {"OPENAI_BASE_URL": f"{llm.url}/v1"}).run({"prompt": "x"})
    assert llm.requests[0].headers["authorization"] == "Bearer none"
    assert outcome.parts[1] == ImagePart(data=PNG, mime_type="image/png")


@pytest.mark.parametrize(
    ("image_model", "arguments", "message"),
    [
        (
            "openai:gpt-image-1",
            {"prompt": "a cat", "size": "999x1"},
            "image_gen: size '999x1' is not one of 1024x1024, 1536x1024, 1024x1536, auto for openai:gpt-image-1",
        ),
        (GPT_IMAGE, {"prompt": "a cat", "n": 11}, f"image_gen: n 11 is not {ONE_TO_TEN} for {GPT_IMAGE}"),
        (GPT_IMAGE, {"prompt": "a cat", "n": 0}, f"image_gen: n 0 is not {ONE_TO_TEN} for {GPT_IMAGE}"),
        (GPT_IMAGE, {"prompt": "a cat", "n": "2"}, f"image_gen: n '2' is not {ONE_TO_TEN} for {GPT_IMAGE}"),
        (GPT_IMAGE, {"prompt": "a cat", "n": True}, f"image_gen: n True is not {ONE_TO_TEN} for {GPT_IMAGE}"),
        (
            "openai:dall-e-3",
            {"prompt": "a cat", "size": "1536x1024"},
            "image_gen: size '1536x1024' is not one of 1024x1024, 1792x1024, 1024x1792 for openai:dall-e-3",
        ),
        ("openai:dall-e-3", {"prompt": "a cat", "n": 2}, "image_gen: n 2 is not 1 for openai:dall-e-3"),
        (
            "openai:dall-e-2",
            {"prompt": "a cat", "size": "auto"},
            "image_gen: size 'auto' is not one of 256x256, 512x512, 1024x1024 for openai:dall-e-2",
        ),
        ("openai:dall-e-2", {"prompt": "a cat", "n": 11}, f"image_gen: n 11 is not {ONE_TO_TEN} for openai:dall-e-2"),
        ("openai:local", {"prompt": "a cat", "size": "0x512"}, f"image_gen: size '0x512' is not {ANY_SIZE}"),
        ("openai:local", {"prompt": "a cat", "size": "big"}, f"image_gen: size 'big' is not {ANY_SIZE}"),
        ("openai:local", {"prompt": "a cat", "size": 512}, f"image_gen: size 512 is not {ANY_SIZE}"),
        ("openai:local", {"prompt": "a cat", "n": 12}, f"image_gen: n 12 is not {ONE_TO_TEN} for openai:local"),
        ("openai:local", {"prompt": " "}, "image_gen: prompt must be a non-empty string, not ' '"),
    ],
)
async def test_bad_arguments_are_refused_before_any_request(
    llm: FakeLLM, image_model: str, arguments: dict[str, Any], message: str
) -> None:
    with pytest.raises(ImageGenError) as caught:
        await image_gen_tool(image_model, openai_env(llm)).run(arguments)
    assert str(caught.value) == message
    assert llm.requests == []


@pytest.mark.parametrize(
    ("image_model", "env", "message"),
    [
        (
            "openai:gpt-image-1",
            {"ANTHROPIC_API_KEY": "k"},
            "image_gen: no image backend for openai:gpt-image-1: set OPENAI_API_KEY, or OPENAI_BASE_URL for an"
            " OpenAI-compatible server",
        ),
        (
            "anthropic:claude-sonnet-5-5",
            {"OPENAI_API_KEY": "k"},
            "image_gen: META_AGENT_IMAGE_MODEL='anthropic:claude-sonnet-5-5' is not supported; set it to openai:MODEL"
            " (e.g. openai:gpt-image-2.5-flare) and set OPENAI_API_KEY, or OPENAI_BASE_URL for an OpenAI-compatible server",
        ),
        ("openai:", {"OPENAI_API_KEY": "k"}, "image_gen: META_AGENT_IMAGE_MODEL='openai:' is not supported"),
        ("gpt-image-1", {"OPENAI_API_KEY": "k"}, "image_gen: META_AGENT_IMAGE_MODEL='gpt-image-1' is not supported"),
    ],
)
async def test_no_backend_says_what_to_set(image_model: str, env: dict[str, str], message: str) -> None:
    with pytest.raises(ImageGenError) as caught:
        await image_gen_tool(image_model, env).run({"prompt": "a cat"})
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("status", "error", "message", "attempts"),
    [
        (401, ProviderAuthError, "the API key was refused (HTTP 401); check OPENAI_API_KEY: no", 1),
        (500, ProviderUnavailable, "the provider failed (HTTP 500) after retries: no", 3),
    ],
)
async def test_api_errors_are_typed_provider_errors(
    llm: FakeLLM, status: int, error: type, message: str, attempts: int
) -> None:
    for _ in range(attempts):
        llm.reply(error_body("no"), status, **FAST_RETRY)
    with pytest.raises(error) as caught:
        await image_gen_tool("openai:gpt-image-1", openai_env(llm)).run({"prompt": "a cat"})
    assert str(caught.value) == f"openai:gpt-image-1: {message}"
    assert len(llm.requests) == attempts  # the SDK retried the 500, and not the 401


@contextmanager
def serving_png() -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 whose /cat.png is TINY_PNG (anything else: 404); its URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = self.path == "/cat.png"
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "image/png" if found else "text/plain")
            body = TINY_PNG if found else b"no such file"
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def test_an_image_answered_as_a_url_is_fetched(llm: FakeLLM) -> None:
    with serving_png() as url:
        tool = image_gen_tool("openai:local", openai_env(llm), fetch_limits=LOOPBACK_ALLOWED)
        llm.reply({"created": 0, "data": [{"url": f"{url}/cat.png"}]})
        outcome = await tool.run({"prompt": "a cat"})
        llm.reply({"created": 0, "data": [{"url": f"{url}/gone.png"}]})
        with pytest.raises(ImageGenError) as caught:
            await tool.run({"prompt": "a cat"})
    image = outcome.parts[1]
    assert isinstance(image, ImagePart) and base64.b64decode(image.data) == TINY_PNG
    assert image.mime_type == "image/png"
    assert str(caught.value) == f"image_gen: openai:local answered with an image URL: {url}/gone.png answered HTTP 404"


@pytest.mark.parametrize(
    ("image_model", "sizes", "max_n"),
    [
        ("openai:gpt-image-1", ["1024x1024", "1536x1024", "1024x1536", "auto"], 10),
        ("openai:dall-e-3", ["1024x1024", "1792x1024", "1024x1792"], 1),
        ("openai:local", None, 10),
    ],
)
def test_the_schema_names_what_the_model_accepts(image_model: str, sizes: list[str] | None, max_n: int) -> None:
    tool = image_gen_tool(image_model, {})
    assert (tool.name, tool.description, tool.hints) == (IMAGE_GEN.name, IMAGE_GEN.description, IMAGE_GEN.hints)
    assert tool.run is not None
    properties = tool.input_schema["properties"]
    assert properties["size"].get("enum") == sizes
    assert properties["n"]["maximum"] == max_n
    assert tool.input_schema["required"] == ["prompt"]
    assert INTERNAL_TOOLS == (IMAGE_GEN, DESCRIBE_IMAGE, READ_RESULT) and IMAGE_GEN.run is None


async def test_a_server_without_an_images_endpoint_is_quoted(llm: FakeLLM) -> None:
    llm.reply({"detail": "Not Found"}, 404)  # what llama.cpp's server answers for /v1/images/generations
    with pytest.raises(ProviderBadRequest) as caught:
        await image_gen_tool("openai:local", openai_env(llm)).run({"prompt": "a cat"})
    assert str(caught.value) == "openai:local: the request was refused (HTTP 404): Not Found"


def local(llm: FakeLLM) -> dict[str, str]:
    """The chat model at the fake endpoint as a local OpenAI-compatible server."""
    return openai_env(llm)


def openai_itself(llm: FakeLLM, base_url: str | None = None) -> dict[str, str]:
    """The chat model at the fake endpoint through the Anthropic SDK; OpenAI's own key (and base URL) for images."""
    at_openai = {"OPENAI_BASE_URL": base_url} if base_url else {}
    return {"ANTHROPIC_BASE_URL": llm.url, "ANTHROPIC_API_KEY": "sk-ant-test", "OPENAI_API_KEY": "sk-test", **at_openai}


@pytest.mark.parametrize(
    ("model", "environ", "image_model", "offered"),
    [
        pytest.param("openai:fake-model", local, None, False, id="local server"),
        pytest.param("openai:fake-model", local, "openai:sd-turbo", True, id="local server, image model set"),
        pytest.param("anthropic:claude-sonnet-5-5", openai_itself, None, True, id="OpenAI itself"),
        pytest.param(
            "anthropic:claude-sonnet-5-5",
            lambda llm: openai_itself(llm, "https://api.openai.com/v1"),
            None,
            True,
            id="OpenAI itself, base URL set",
        ),
        pytest.param(
            "anthropic:claude-sonnet-5-5",
            lambda llm: {k: v for k, v in openai_itself(llm).items() if k != "OPENAI_API_KEY"},
            None,
            False,
            id="no OpenAI key",
        ),
    ],
)
async def test_image_gen_is_offered_only_where_its_backend_is_configured(
    llm: FakeLLM, model: str, environ: Callable[[FakeLLM], dict[str, str]], image_model: str | None, offered: bool
) -> None:
    anthropic = model.startswith("anthropic")
    llm.reply(anthropic_reply({"type": "text", "text": "fine"}) if anthropic else openai_reply("fine"))
    server = build_server(Settings(model=model, image_model=image_model), {}, environ(llm))
    async with Client(server) as client:
        listed = {tool.name for tool in (await client.list_tools()).tools}
        result = await client.call_tool("ask", {"prompt": "draw me something"})
    assert not result.is_error, result.content
    sent = [tool.get("name") or tool["function"]["name"] for tool in llm.requests[-1].body.get("tools", [])]
    assert ("image_gen" in sent, "image_gen" in listed) == (offered, offered)


@pytest.mark.parametrize(
    ("image_model", "environ", "why"),
    [
        (None, {"OPENAI_API_KEY": "k"}, None),
        ("openai:sd", {"OPENAI_BASE_URL": "http://127.0.0.1:8080/v1"}, None),
        (
            None,
            {"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "http://127.0.0.1:8080/v1"},
            (
                "META_AGENT_IMAGE_MODEL is not set and OPENAI_BASE_URL points at 127.0.0.1, not OpenAI: set"
                " META_AGENT_IMAGE_MODEL=openai:MODEL if that server has an images endpoint"
            ),
        ),
        (
            None,
            {"OPENAI_BASE_URL": "https://api.openai.com/v1"},
            (
                "META_AGENT_IMAGE_MODEL is not set and OPENAI_API_KEY is not set: set OPENAI_API_KEY for OpenAI's"
                " images API, or META_AGENT_IMAGE_MODEL=openai:MODEL and OPENAI_BASE_URL for an OpenAI-compatible"
                " server's"
            ),
        ),
        ("openai:sd", {}, f"no image backend for openai:sd: {WHAT_TO_SET}"),
        (
            "sd",
            {"OPENAI_API_KEY": "k"},
            (
                "META_AGENT_IMAGE_MODEL='sd' is not supported; set it to openai:MODEL (e.g. openai:gpt-image-2.5-flare)"
                f" and {WHAT_TO_SET}"
            ),
        ),
    ],
)
def test_why_image_gen_is_withheld(image_model: str | None, environ: dict[str, str], why: str | None) -> None:
    assert image_gen_withheld(image_model, environ) == why


async def test_an_image_model_set_but_unusable_is_withheld_and_said_so() -> None:
    with capture_logs() as logs:
        async with Client(build_server(Settings(image_model="sd"), {}, {"OPENAI_API_KEY": "k"})) as client:
            listed = {tool.name for tool in (await client.list_tools()).tools}
    assert listed == {"ask", "plan", "agent"}
    [warning] = [entry for entry in logs if entry["event"] == "image_gen_withheld"]
    assert warning["reason"].startswith("META_AGENT_IMAGE_MODEL='sd' is not supported")
