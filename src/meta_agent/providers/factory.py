"""The provider a `provider:model` names, made here, the vendor SDK imported only then:

openai:MODEL     the official openai SDK (OPENAI_API_KEY, OPENAI_BASE_URL): the Responses API against OpenAI itself,
                 Chat Completions against any other OpenAI-compatible server (META_AGENT_OPENAI_API forces either)
ollama:MODEL     Chat Completions at Ollama's OpenAI-compatible /v1 (OLLAMA_HOST)
gemini:MODEL     Chat Completions at Gemini's OpenAI-compatible endpoint (GEMINI_API_KEY)
anthropic:MODEL  the official anthropic SDK, Messages with tools (ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL)
sampling         the host's own model through MCP sampling (given by the MCP front)

A fallback chain (`openai:gpt-5.5,ollama:qwen3`) is made one model at a time by the model chain (providers/chain.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any, Literal
from urllib.parse import urlsplit

import anyio

from meta_agent.core.provider import Provider
from meta_agent.errors import ModelNotConfigured
from meta_agent.providers.model_setting import (
    CANNOT_SAMPLE,
    WHAT_TO_SET,
    default_model,
    ollama_url,
    parse_model,
    setting_problem,
)

OPENAI_HOST = "api.openai.com"  # where `openai:` speaks the Responses API unless told otherwise
GEMINI_BASE_URL = "https://generativelanguage.googleapis.com/v1beta/openai/"

OpenAIApi = Literal["responses", "chat"]  # the wire formats of the OpenAI-compatible providers


def make_provider(
    spec: str,
    environ: Mapping[str, str],
    *,
    sampling: Provider | None = None,
    timeout: float | None = None,
    openai_api: OpenAIApi | None = None,
    aiohttp: bool = False,
) -> Provider:
    """The provider `spec` names. The vendor SDK is imported here, not before.

    Args:
        spec: one model, `provider:model` (`openai:gpt-5.5`, `anthropic:...`, `ollama:qwen3`, `gemini:...`), or
            `sampling` for the caller's own model.
        environ: where the API keys and endpoints are read (`OPENAI_API_KEY`, `OPENAI_BASE_URL`, `OLLAMA_HOST`...).
        sampling: the caller's model, which `sampling` names; None where the caller cannot sample.
        timeout: seconds a request may take, per attempt; None: the SDK's own.
        openai_api: forces the wire format of `openai:` (None: the Responses API against OpenAI itself, Chat
            Completions elsewhere); the ollama: and gemini: presets speak Chat Completions.
        aiohttp: the vendor SDK sends its requests through its aiohttp transport instead of httpx2 (see
            `vendor_http_client`).

    Returns:
        The provider, not yet connected; close it with `aclose()`.

    Raises:
        ModelNotConfigured: an unknown provider, a missing API key, or `sampling` where the caller cannot sample.
    """
    provider, model = parse_model(spec)
    if provider == "sampling":
        if sampling is None:
            raise ModelNotConfigured(f"META_AGENT_MODEL=sampling: {CANNOT_SAMPLE}; {WHAT_TO_SET}")
        return sampling
    problem = setting_problem(spec, environ)
    if problem is not None:  # said before a vendor SDK is imported (half a second)
        raise ModelNotConfigured(problem)
    if provider == "anthropic":
        from meta_agent.providers.anthropic import AnthropicProvider

        return AnthropicProvider(
            model,
            api_key=environ.get("ANTHROPIC_API_KEY"),
            base_url=environ.get("ANTHROPIC_BASE_URL") or None,
            timeout=timeout,
            aiohttp=aiohttp,
        )
    from meta_agent.providers.openai import OpenAIProvider
    from meta_agent.providers.openai_responses import OpenAIResponsesProvider

    base_url = (environ.get("OPENAI_BASE_URL") or None) if provider == "openai" else None
    at_openai = provider == "openai" and (base_url is None or urlsplit(base_url).hostname == OPENAI_HOST)
    api = (openai_api or ("responses" if at_openai else "chat")) if provider == "openai" else "chat"
    make = OpenAIResponsesProvider if api == "responses" else OpenAIProvider
    if provider == "ollama":
        base_url = f"{ollama_url(environ)}/v1"
        return make(model, label="ollama", base_url=base_url, api_key="ollama", timeout=timeout, aiohttp=aiohttp)
    if provider == "gemini":
        gemini_key = environ["GEMINI_API_KEY"]  # there is one: `setting_problem` said so
        return make(
            model, label="gemini", base_url=GEMINI_BASE_URL, api_key=gemini_key, timeout=timeout, aiohttp=aiohttp
        )
    key = environ.get("OPENAI_API_KEY") or None
    return make(model, base_url=base_url, api_key=key, timeout=timeout, aiohttp=aiohttp)


async def resolve_provider(
    spec: str | None, environ: Mapping[str, str], *, sampling: Provider | None = None, **options: Any
) -> Provider:
    """The provider for a run: `spec` if set; else the host's model through sampling; else the default model of the
    first provider whose API key is set; else Ollama if it answers at OLLAMA_HOST.

    Args:
        spec: one model of META_AGENT_MODEL (`provider:model`), or None to look for one as above.
        environ: where the API keys and endpoints are read.
        sampling: the caller's model, where the caller can sample.
        **options: passed on to `make_provider` (`timeout`: seconds a request may take, per attempt; `openai_api`;
            `aiohttp`).

    Returns:
        The provider, as `make_provider` makes it (or `sampling` itself).

    Raises:
        ModelNotConfigured: nothing usable, with exactly what to set.
    """
    if spec:
        return await made_provider(spec, environ, sampling=sampling, **options)
    if sampling is not None:
        return sampling
    return await made_provider(await default_model(environ), environ, **options)


async def made_provider(spec: str, environ: Mapping[str, str], **options: Any) -> Provider:
    """`make_provider` on a worker thread: importing a vendor's SDK takes half a second, and the event loop must go
    on serving meanwhile (children finishing their handshake, other callers)."""
    return await anyio.to_thread.run_sync(partial(make_provider, spec, environ, **options))
