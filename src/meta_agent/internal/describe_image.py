"""The `describe_image` internal tool: an image and a question in, a vision model's text out (README, MCP tools).

The image is an http(s) URL (fetched within a size cap and a time limit, redirects followed to http(s) only), a
`data:image/...;base64,` URL, or a reference (`image-1`) to an image an earlier tool result of the run returned. The
model is META_AGENT_VISION_MODEL, made for the call and closed after it, else the run's own model when it takes
images. Whatever the tool refuses is a one-line error result for the model; the run goes on.
"""

from __future__ import annotations

import dataclasses
import re
import reprlib
from collections.abc import Mapping
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import anyio

from meta_agent.core import tool_call
from meta_agent.core.messages import ImagePart, ModelRequest, TextPart, UserMessage
from meta_agent.core.provider import Provider
from meta_agent.core.tools import NO_RUN, InternalTool, RunContext, ToolHints, ToolOutcome
from meta_agent.errors import ModelNotConfigured
from meta_agent.internal.images import (
    FETCH_LIMITS,
    FetchLimits,
    ImageRefused,
    decode_data_url,
    fetch_image,
    shown_url,
)
from meta_agent.providers.factory import make_provider
from meta_agent.providers.model_setting import parse_model
from meta_agent.shared.text import some_of

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
_REFERENCE_MAX = 30  # characters of the longest reference worth reading as one
_SCHEME = re.compile(r"\s*([A-Za-z][A-Za-z0-9+.-]*):")  # RFC 3986's scheme, as urlsplit takes it
_SCHEME_MAX = 40  # characters read for a scheme: those of any scheme in use, and then some
_REFS_SHOWN = 10  # the run's image references listed when the model names one that is not there


def describe_image_tool(
    vision_model: str | None,
    environ: Mapping[str, str],
    *,
    model_timeout: float | None = None,
    limits: FetchLimits = FETCH_LIMITS,
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
        except ImageRefused as exc:
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
        raise ImageRefused(f"question must be a string, not {reprlib.repr(value)}")  # bounded: it may be huge
    return value.strip()


async def _model(
    vision_model: str | None, environ: Mapping[str, str], model_timeout: float | None, context: RunContext
) -> tuple[Provider, bool]:
    """The model to ask, and whether it was made for this call (to be closed after it): META_AGENT_VISION_MODEL,
    made on a worker thread (a vendor SDK takes half a second to import); else the run's model where it takes images.

    Raises:
        ImageRefused: no model here takes images, or META_AGENT_VISION_MODEL cannot be made (a key not set), with what
            to set.
    """
    if vision_model:
        try:
            made = await anyio.to_thread.run_sync(partial(make_provider, vision_model, environ, timeout=model_timeout))
        except ModelNotConfigured as exc:
            raise ImageRefused(f"META_AGENT_VISION_MODEL={vision_model} cannot be used: {exc}") from None
        return made, True
    if context.model is None:
        raise ImageRefused(f"no model to ask: {WHAT_TO_SET}")
    if not context.model.accepts_images:
        raise ImageRefused(f"the run's model {context.model.name} does not take images: {WHAT_TO_SET}")
    return context.model, False


async def _described(model: Provider, image: ImagePart, question: str) -> str:
    """What `model` answers about `image`.

    Raises:
        ImageRefused: the model answered with no text.
        ProviderError: the model failed.
    """
    request = ModelRequest(system=SYSTEM, messages=(UserMessage(parts=(image, TextPart(text=question))),))
    response = await model.complete(request)
    if not response.text.strip():
        raise ImageRefused(f"{model.name} answered with no text")
    return response.text.strip()


async def _image(value: Any, context: RunContext, limits: FetchLimits) -> ImagePart:
    """The image `value` names.

    Raises:
        ImageRefused: not an image describe_image takes or can get, in one line.
    """
    if not isinstance(value, str) or not value or value.isspace():
        raise ImageRefused(
            f"image must be an http(s) URL, a data:image URL or a reference like image-1, not {reprlib.repr(value)}"
        )
    scheme = _scheme(value)
    if scheme == "data":  # before anything copies it: a data URL may be many megabytes
        return await decode_data_url(value, limits.max_bytes)
    text = value.strip()
    if len(text) <= _REFERENCE_MAX and _REFERENCE.fullmatch(text.lower()):
        return _referenced(text.lower(), context)
    if scheme in ("http", "https"):
        try:
            urlsplit(text)
        except ValueError:  # e.g. an unclosed IPv6 bracket
            raise ImageRefused(f"{shown_url(text)!r} is not a URL") from None
        return await fetch_image(text, limits)
    if scheme:
        raise ImageRefused(
            f"{scheme}: URLs are not accepted; give an http(s) or data:image URL, or a reference like image-1"
        )
    raise ImageRefused(
        f"{shown_url(text)!r} is neither an http(s) or data:image URL nor a reference like image-1 to an"
        " image of this run"
    )


def _scheme(text: str) -> str:
    """The scheme `text` starts with (after white space), lower case, as `urlsplit` reads it; "" for none. Read from
    its first characters only: the URL may be a data URL of many megabytes, which nothing here copies."""
    found = _SCHEME.match(text[:_SCHEME_MAX])
    return found[1].lower() if found else ""


def _referenced(ref: str, context: RunContext) -> ImagePart:
    """The run's image of that reference. A result handle (`read_result`'s) is to resolve here too,
    once results are kept whole for the run: the image of the result it names.

    Raises:
        ImageRefused: no image of the run has that reference.
    """
    image = context.images.get(ref)
    if image is not None:
        return image
    if not context.images:
        raise ImageRefused(f"there is no {ref}: no tool result of this run has returned an image")
    known = sorted(context.images, key=lambda name: int(name.partition("-")[2]), reverse=True)
    raise ImageRefused(f"there is no {ref}; this run's images are {some_of(known, _REFS_SHOWN)}")
