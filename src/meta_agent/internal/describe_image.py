"""The `describe_image` internal tool: an image and a question in, a vision model's text out (design.md §2.7).

The image is an http(s) URL (fetched within a size cap and a time limit, redirects followed to http(s) only), a
`data:image/...;base64,` URL, or a reference (`image-1`) to an image an earlier tool result of the run returned. The
model is META_AGENT_VISION_MODEL, made for the call and closed after it, else the run's own model when it takes
images. Whatever the tool refuses is a one-line error result for the model; the run goes on.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

import anyio
import httpx2

from meta_agent.core import tool_call
from meta_agent.core.messages import ImagePart, ModelRequest, TextPart, UserMessage
from meta_agent.core.provider import Provider
from meta_agent.core.tools import NO_RUN, InternalTool, RunContext, ToolHints, ToolOutcome
from meta_agent.errors import ModelNotConfigured
from meta_agent.providers import make_provider, parse_model
from meta_agent.text import one_line, some_of
from meta_agent.version import __version__

DESCRIBE_IMAGE = InternalTool(
    name="describe_image",
    description=(
        "Look at an image with a vision model and answer a question about it (by default: describe it). The image"
        " is an http(s) URL, a data:image/...;base64 URL, or the reference of an image an earlier tool result"
        " returned (image-1, image-2, ...). Returns text."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "image": {
                "type": "string",
                "description": "An http(s) URL, a data:image/...;base64 URL, or a reference such as image-1.",
            },
            "question": {"type": "string", "description": "What to ask about the image (default: describe it)."},
        },
        "required": ["image"],
    },
    # It changes nothing anywhere, so it is read-only (plan mode may use it); it fetches URLs and asks a model
    # outside meta-agent, so it is open-world.
    hints=ToolHints(title="Describe an image", read_only_hint=True, destructive_hint=False, open_world_hint=True),
)

DEFAULT_QUESTION = "Describe this image."
SYSTEM = (
    "You look at images for another assistant that cannot see them. Answer the question about the image"
    " accurately and concisely, quoting any text in it that matters; say what you cannot make out."
)
WHAT_TO_SET = "set META_AGENT_VISION_MODEL to a model that takes images (e.g. openai:gpt-5.5)"
_REFERENCE = re.compile(r"image-[0-9]+")
_SHOWN_URL = 100  # characters of a URL repeated in an error
_REFS_SHOWN = 10  # the run's image references listed when the model names one that is not there
USER_AGENT = f"meta-agent/{__version__} (describe_image)"  # some image hosts refuse requests that do not say who asks
# The first bytes of the formats vision APIs take: a server's content type is trusted only where these say nothing
# (Anthropic refuses an image whose media type does not match its bytes).
_SIGNATURES = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"GIF8", "image/gif"))


@dataclass(frozen=True, kw_only=True)
class FetchLimits:
    """How far describe_image goes for an image: its size in bytes (20 MB, about what vision APIs take in one
    image), the seconds a whole fetch may take, redirects included, and how many redirects it follows."""

    max_bytes: int = 20_000_000
    timeout: float = 30.0
    max_redirects: int = 5


class _Refused(Exception):
    """What describe_image will not do as asked; `str(error)` is the line the model reads."""


def describe_image_tool(
    vision_model: str | None,
    environ: Mapping[str, str],
    *,
    model_timeout: float | None = None,
    limits: FetchLimits = FetchLimits(),
) -> InternalTool:
    """`DESCRIBE_IMAGE` with a backend: `vision_model` (`provider:model`, configured from `environ`; `model_timeout`:
    seconds per request) or, where None, the run's own model.

    The returned tool's `run` raises:
        ProviderError: the vision model failed (a subclass naming what failed, after the SDK's retries).
    """

    async def run(arguments: Mapping[str, Any], context: RunContext = NO_RUN) -> ToolOutcome:
        try:
            question = _question(arguments.get("question"))
            model, made = await _model(vision_model, environ, model_timeout, context)
            try:
                text = await _described(model, await _image(arguments.get("image"), context, limits), question)
            finally:
                if made:
                    with anyio.CancelScope(shield=True):  # closed even when the run is cancelled mid-call
                        await model.aclose()
        except _Refused as exc:
            return tool_call.error(f"describe_image: {exc}")
        return ToolOutcome(parts=(TextPart(text=text),))

    return dataclasses.replace(DESCRIBE_IMAGE, run=run)


def vision_model_withheld(vision_model: str | None) -> str | None:
    """Why describe_image is not offered, in one line: a META_AGENT_VISION_MODEL that names no model it could ask.
    None where it is unset (the run's model is asked) or names one; a missing key is told at the call, as for the
    run's own model."""
    if not vision_model:
        return None
    try:
        provider, _ = parse_model(vision_model)
    except ModelNotConfigured:
        provider = ""
    if "," in vision_model or provider in ("", "sampling"):
        return (
            f"META_AGENT_VISION_MODEL={vision_model!r} is not one provider:model (openai:, anthropic:, ollama: or"
            " gemini:, e.g. openai:gpt-5.5)"
        )
    return None


def _question(value: Any) -> str:
    if value is None or (isinstance(value, str) and not value.strip()):
        return DEFAULT_QUESTION
    if not isinstance(value, str):
        raise _Refused(f"question must be a string, not {value!r}")
    return value.strip()


async def _model(
    vision_model: str | None, environ: Mapping[str, str], model_timeout: float | None, context: RunContext
) -> tuple[Provider, bool]:
    """The model to ask, and whether it was made for this call (to be closed after it): META_AGENT_VISION_MODEL,
    made on a worker thread (a vendor SDK takes half a second to import); else the run's model where it takes images.

    Raises:
        _Refused: no model here takes images, or META_AGENT_VISION_MODEL cannot be made (a key not set), with what
            to set.
    """
    if vision_model:
        try:
            made = await anyio.to_thread.run_sync(partial(make_provider, vision_model, environ, timeout=model_timeout))
        except ModelNotConfigured as exc:
            raise _Refused(f"META_AGENT_VISION_MODEL={vision_model} cannot be used: {exc}") from None
        return made, True
    if context.model is None:
        raise _Refused(f"no model to ask: {WHAT_TO_SET}")
    if not context.model.accepts_images:
        raise _Refused(f"the run's model {context.model.name} does not take images: {WHAT_TO_SET}")
    return context.model, False


async def _described(model: Provider, image: ImagePart, question: str) -> str:
    """What `model` answers about `image`.

    Raises:
        _Refused: the model answered with no text.
        ProviderError: the model failed.
    """
    request = ModelRequest(system=SYSTEM, messages=(UserMessage(parts=(image, TextPart(text=question))),))
    response = await model.complete(request)
    if not response.text.strip():
        raise _Refused(f"{model.name} answered with no text")
    return response.text.strip()


async def _image(value: Any, context: RunContext, limits: FetchLimits) -> ImagePart:
    """The image `value` names.

    Raises:
        _Refused: not an image describe_image takes or can get, in one line.
    """
    if not isinstance(value, str) or not value.strip():
        raise _Refused(f"image must be an http(s) URL, a data:image URL or a reference like image-1, not {value!r}")
    text = value.strip()
    if _REFERENCE.fullmatch(text.lower()):
        return _referenced(text.lower(), context)
    try:
        scheme = urlsplit(text).scheme.lower()
    except ValueError:  # e.g. an unclosed IPv6 bracket
        raise _Refused(f"{one_line(text, _SHOWN_URL)!r} is not a URL") from None
    if scheme in ("http", "https"):
        return await _fetched(text, limits)
    if scheme == "data":
        return _decoded(text, limits.max_bytes)
    if scheme:
        raise _Refused(
            f"{scheme}: URLs are not accepted; give an http(s) or data:image URL, or a reference like image-1"
        )
    raise _Refused(
        f"{one_line(text, _SHOWN_URL)!r} is neither an http(s) or data:image URL nor a reference like image-1 to an"
        " image of this run"
    )


def _referenced(ref: str, context: RunContext) -> ImagePart:
    """The run's image of that reference. A result handle (design.md §2.7, `read_result`) is to resolve here too,
    once results are kept whole for the run: the image of the result it names.

    Raises:
        _Refused: no image of the run has that reference.
    """
    image = context.images.get(ref)
    if image is not None:
        return image
    if not context.images:
        raise _Refused(f"there is no {ref}: no tool result of this run has returned an image")
    known = sorted(context.images, key=lambda name: int(name.partition("-")[2]), reverse=True)
    raise _Refused(f"there is no {ref}; this run's images are {some_of(known, _REFS_SHOWN)}")


def _decoded(url: str, max_bytes: int) -> ImagePart:
    """The image of a `data:image/...;base64,` URL.

    Raises:
        _Refused: another kind of data URL, malformed base64, or too large.
    """
    header, comma, payload = url.partition(",")
    media, *options = header[len("data:") :].split(";")
    mime = media.strip().lower()
    if not comma or not mime.startswith("image/"):
        raise _Refused(f"the data URL holds {mime or 'text/plain'}, not an image (data:image/png;base64,...)")
    if "base64" not in (option.strip().lower() for option in options):
        raise _Refused("only base64 data URLs are accepted (data:image/png;base64,...)")
    payload = "".join(unquote(payload).split())
    if len(payload) * 3 // 4 > max_bytes:
        raise _Refused(f"the data URL's image is larger than {max_bytes:,} bytes")
    try:
        raw = base64.b64decode(payload, validate=True)
    except binascii.Error:
        raise _Refused("the data URL's base64 is malformed") from None
    return _image_part(raw, mime, "the data URL")


async def _fetched(url: str, limits: FetchLimits) -> ImagePart:
    """The image at an http(s) URL, within `limits`.

    Raises:
        _Refused: it could not be fetched in time, is not an image, or is too large.
    """
    shown = one_line(url, _SHOWN_URL)
    try:
        with anyio.fail_after(limits.timeout):
            return await _get(url, shown, limits)
    except (TimeoutError, httpx2.TimeoutException):
        raise _Refused(f"fetching {shown} took longer than {limits.timeout:g} s") from None
    except (httpx2.HTTPError, httpx2.InvalidURL) as exc:
        raise _Refused(f"could not fetch {shown}: {type(exc).__name__}: {one_line(str(exc))}") from None


async def _get(url: str, shown: str, limits: FetchLimits) -> ImagePart:
    """GET `url`, following redirects to http(s) URLs only, at most `limits.max_redirects` of them."""
    headers = {"User-Agent": USER_AGENT, "Accept": "image/*"}
    async with httpx2.AsyncClient(headers=headers, timeout=limits.timeout, follow_redirects=False) as http:
        for _ in range(limits.max_redirects + 1):
            async with http.stream("GET", url) as response:
                if not response.has_redirect_location:
                    return await _body(response, shown, limits.max_bytes)
                url = urljoin(str(response.url), response.headers["location"])
                if urlsplit(url).scheme.lower() not in ("http", "https"):
                    raise _Refused(f"{shown} redirects to {one_line(url, _SHOWN_URL)}, which is not an http(s) URL")
    raise _Refused(f"{shown} redirects more than {limits.max_redirects} times")


async def _body(response: httpx2.Response, shown: str, max_bytes: int) -> ImagePart:
    """The image a response carries, read no further than `max_bytes`."""
    if not response.is_success:
        raise _Refused(f"{shown} answered HTTP {response.status_code}")
    mime = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    if not mime.startswith("image/"):
        raise _Refused(f"{shown} is {mime or 'of no content type'}, not an image")
    length = response.headers.get("content-length", "")
    if length.isdigit() and int(length) > max_bytes:
        raise _Refused(f"{shown} is larger than {max_bytes:,} bytes ({int(length):,})")
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > max_bytes:
            raise _Refused(f"{shown} is larger than {max_bytes:,} bytes")
    return _image_part(bytes(body), mime, shown)


def _image_part(raw: bytes, declared: str, shown: str) -> ImagePart:
    """`raw` as an image part, its media type what its first bytes say where they say it (WebP too).

    Raises:
        _Refused: no bytes at all.
    """
    if not raw:
        raise _Refused(f"{shown} holds no image data")
    sniffed = next((mime for signature, mime in _SIGNATURES if raw.startswith(signature)), None)
    if raw[:4] == b"RIFF" and raw[8:12] == b"WEBP":
        sniffed = "image/webp"
    return ImagePart(data=base64.b64encode(raw).decode("ascii"), mime_type=sniffed or declared)
