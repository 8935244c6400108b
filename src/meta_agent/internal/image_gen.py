"""The `image_gen` internal tool: its declaration, and `image_gen_tool`, which gives it a backend.

The backend is the official `openai` SDK's images API (`META_AGENT_IMAGE_MODEL`, default `openai:gpt-image-2.5-flare`),
which also reaches OpenAI-compatible servers through `OPENAI_BASE_URL`. Images come back as base64 PNG parts; an
image the API answers with as a URL is fetched (internal/images.py), as describe_image fetches: never from an address
inside the network unless META_AGENT_FETCH_ALLOW_NETWORKS allows it.
`image_gen_withheld` says where the tool is not offered: most OpenAI-compatible servers have no images endpoint.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from meta_agent.core.messages import ImagePart, Part, TextPart
from meta_agent.core.tools import NO_RUN, InternalTool, RunContext, ToolHints, ToolOutcome
from meta_agent.errors import ImageGenError
from meta_agent.internal.images import FETCH_LIMITS, FetchLimits, ImageRefused, fetch_image
from meta_agent.providers.wire import provider_error
from meta_agent.shared.text import one_line, plural

IMAGE_GEN = InternalTool(
    name="image_gen",
    description="Generate images from a text prompt; returns PNG images.",
    input_schema={
        "type": "object",
        "properties": {
            "prompt": {"type": "string", "description": "What the image should show."},
            "size": {
                "type": "string",
                "description": "WIDTHxHEIGHT, e.g. 1024x1024, or auto; the model's default size if absent.",
            },
            "n": {"type": "integer", "minimum": 1, "maximum": 10, "description": "How many images (default 1)."},
        },
        "required": ["prompt"],
    },
    # It changes nothing outside meta-agent, so it is read-only (README, Trust and approval: read-only tools
    # default to `always`); it reaches an outside service, so it is open-world.
    hints=ToolHints(title="Generate images", read_only_hint=True, destructive_hint=False, open_world_hint=True),
)

WHAT_TO_SET = "set OPENAI_API_KEY, or OPENAI_BASE_URL for an OpenAI-compatible server"
# Not gpt-image-1, which the installed openai SDK marks as shut down: its named successor.
DEFAULT_IMAGE_MODEL = "openai:gpt-image-2.5-flare"
OPENAI_HOST = "api.openai.com"  # where the default image model lives
_ANY_SIZE = re.compile(r"auto|[1-9][0-9]*x[1-9][0-9]*")
_SIZES_KNOWN = "Image size, one of the listed; the model's default size if absent."
_PROMPT_SHOWN = 80  # characters of the prompt repeated in the summary line


@dataclass(frozen=True, kw_only=True)
class ImageModelLimits:
    """What one image model accepts; `sizes` None means any WIDTHxHEIGHT or auto."""

    sizes: tuple[str, ...] | None = None
    max_n: int = 10
    # DALL·E answers with URLs unless asked for base64; GPT image models refuse the parameter.
    asks_for_base64: bool = False


_GPT_IMAGE = ImageModelLimits(sizes=("1024x1024", "1536x1024", "1024x1536", "auto"))
KNOWN_MODELS: Mapping[str, ImageModelLimits] = {
    "gpt-image-1": _GPT_IMAGE,
    "gpt-image-1-mini": _GPT_IMAGE,
    "gpt-image-1.5": _GPT_IMAGE,
    "gpt-image-2.5-flare": _GPT_IMAGE,
    "gpt-image-2.5-sunburst": _GPT_IMAGE,
    "dall-e-3": ImageModelLimits(sizes=("1024x1024", "1792x1024", "1024x1792"), max_n=1, asks_for_base64=True),
    "dall-e-2": ImageModelLimits(sizes=("256x256", "512x512", "1024x1024"), asks_for_base64=True),
}


def image_gen_tool(
    image_model: str, environ: Mapping[str, str], *, fetch_limits: FetchLimits = FETCH_LIMITS
) -> InternalTool:
    """`IMAGE_GEN` with a backend: `image_model` (`provider:model`) through the `openai` SDK, configured from
    `environ` (OPENAI_API_KEY, OPENAI_BASE_URL). The schema lists the sizes the model accepts, where known. An image
    the API answers with as a URL is fetched within `fetch_limits` (describe_image's: its size, time and networks).

    The returned tool's `run` raises:
        ImageGenError: a bad argument, no usable backend (naming what to set), or an answer without image data.
        ProviderError: the images API failed (a subclass naming what failed, after the SDK's retries).
    """
    model = image_model.strip().partition(":")[2]
    limits = KNOWN_MODELS.get(model, ImageModelLimits())

    async def run(arguments: Mapping[str, Any], _context: RunContext = NO_RUN) -> ToolOutcome:
        api_key, base_url = _backend(image_model, environ)
        prompt, size, n = _checked(arguments, limits, image_model)
        request: dict[str, Any] = {"model": model, "prompt": prompt, "n": n}
        if size is not None:
            request["size"] = size
        if limits.asks_for_base64:
            request["response_format"] = "b64_json"
        import openai  # here, not at the top: the SDK takes half a second to import and a server may never draw

        async with openai.AsyncOpenAI(api_key=api_key, base_url=base_url) as client:
            try:
                response = await client.images.generate(**request)
            except openai.OpenAIError as exc:
                raise provider_error(
                    exc, openai, name=image_model, key_variable="OPENAI_API_KEY", base_url=str(client.base_url)
                ) from None
        images = await _images(response.data or [], image_model, fetch_limits)
        summary = _summary(len(images), size or response.size, prompt)
        return ToolOutcome(parts=(TextPart(text=summary), *images))

    return dataclasses.replace(IMAGE_GEN, input_schema=_schema(limits), run=run)


def image_gen_withheld(image_model: str | None, environ: Mapping[str, str]) -> str | None:
    """Why `image_gen` is not offered, in one line; None where its backend is configured: an explicit
    META_AGENT_IMAGE_MODEL (`image_model`) with an endpoint, or, for the default model, OpenAI itself (OPENAI_API_KEY
    set; OPENAI_BASE_URL unset or at api.openai.com). Elsewhere the default model's calls could only fail."""
    if image_model:
        try:
            _backend(image_model, environ)
        except ImageGenError as exc:
            return str(exc).removeprefix("image_gen: ")
        return None
    base_url = environ.get("OPENAI_BASE_URL") or None
    host = (urlsplit(base_url).hostname or base_url) if base_url else None
    if environ.get("OPENAI_API_KEY") and host in (None, OPENAI_HOST):
        return None
    if host not in (None, OPENAI_HOST):
        return (
            f"META_AGENT_IMAGE_MODEL is not set and OPENAI_BASE_URL points at {host}, not OpenAI: set"
            " META_AGENT_IMAGE_MODEL=openai:MODEL if that server has an images endpoint"
        )
    return (
        "META_AGENT_IMAGE_MODEL is not set and OPENAI_API_KEY is not set: set OPENAI_API_KEY for OpenAI's images"
        " API, or META_AGENT_IMAGE_MODEL=openai:MODEL and OPENAI_BASE_URL for an OpenAI-compatible server's"
    )


def _backend(image_model: str, environ: Mapping[str, str]) -> tuple[str, str | None]:
    """The API key and base URL (None: OpenAI's own) for the images API.

    Raises:
        ImageGenError: an image model that is not `openai:NAME`, or neither a key nor a base URL.
    """
    provider, _, model = image_model.strip().partition(":")
    if provider != "openai" or not model:
        raise ImageGenError(
            f"image_gen: META_AGENT_IMAGE_MODEL={image_model!r} is not supported; set it to openai:MODEL"
            f" (e.g. openai:gpt-image-2.5-flare) and {WHAT_TO_SET}"
        )
    api_key = environ.get("OPENAI_API_KEY") or None
    base_url = environ.get("OPENAI_BASE_URL") or None
    if api_key is None and base_url is None:
        raise ImageGenError(f"image_gen: no image backend for {image_model}: {WHAT_TO_SET}")
    return api_key or "none", base_url  # local OpenAI-compatible servers take any key


def _checked(arguments: Mapping[str, Any], limits: ImageModelLimits, image_model: str) -> tuple[str, str | None, int]:
    """The prompt, size (None: the model's default) and n, once they fit the model.

    Raises:
        ImageGenError: one line naming the argument and what the model accepts.
    """
    prompt, size, n = arguments.get("prompt"), arguments.get("size"), arguments.get("n", 1)
    if not isinstance(prompt, str) or not prompt.strip():
        raise ImageGenError(f"image_gen: prompt must be a non-empty string, not {prompt!r}")
    if size is not None and limits.sizes is not None and size not in limits.sizes:
        accepted = ", ".join(limits.sizes)
        raise ImageGenError(f"image_gen: size {size!r} is not one of {accepted} for {image_model}")
    if size is not None and limits.sizes is None and not (isinstance(size, str) and _ANY_SIZE.fullmatch(size)):
        raise ImageGenError(f"image_gen: size {size!r} is not WIDTHxHEIGHT (positive integers) or auto")
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= limits.max_n:
        accepted = "1" if limits.max_n == 1 else f"an integer from 1 to {limits.max_n}"
        raise ImageGenError(f"image_gen: n {n!r} is not {accepted} for {image_model}")
    return prompt, size, n


async def _images(data: list[Any], image_model: str, limits: FetchLimits) -> list[Part]:
    """The images of an answer: base64 as they are, an image given as a URL fetched (http(s) only, within `limits`:
    a size, a time limit, global addresses or the networks allowed; DALL·E and some OpenAI-compatible servers answer
    with URLs).

    Raises:
        ImageGenError: no images, an image without data, or a URL that could not be fetched.
    """
    if not data:
        raise ImageGenError(f"image_gen: {image_model} returned no images")
    images: list[Part] = []
    for item in data:
        if item.b64_json:
            images.append(ImagePart(data=item.b64_json, mime_type="image/png"))
        elif item.url and urlsplit(item.url).scheme.lower() in ("http", "https"):
            try:
                images.append(await fetch_image(item.url, limits))
            except ImageRefused as exc:
                raise ImageGenError(f"image_gen: {image_model} answered with an image URL: {exc}") from None
        else:
            raise ImageGenError(f"image_gen: {image_model} returned an image without data")
    return images


def _summary(count: int, size: str | None, prompt: str) -> str:
    shown = one_line(prompt, _PROMPT_SHOWN)
    images = plural(count, "image")
    at_size = f" ({size})" if size else ""
    return f'generated {images}{at_size} for "{shown}"'


def _schema(limits: ImageModelLimits) -> Mapping[str, Any]:
    """IMAGE_GEN's schema with the model's own sizes and image count."""
    properties = dict(IMAGE_GEN.input_schema["properties"])
    if limits.sizes is not None:
        properties["size"] = {**properties["size"], "enum": list(limits.sizes), "description": _SIZES_KNOWN}
    properties["n"] = {**properties["n"], "maximum": limits.max_n}
    return {**IMAGE_GEN.input_schema, "properties": properties}
