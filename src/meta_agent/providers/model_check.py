"""`meta-agent check`'s look at the model: could a run start with the model settings as they are here? One verdict
per model of META_AGENT_MODEL (each of a fallback chain), made of the checks `run` makes before it starts
(model_setting.py: the provider known, its key present) and, for an endpoint on this machine or its network
(localhost, a loopback or private address), a look that it answers: one GET of its model list, bounded in time and
size. A remote endpoint (OpenAI's, Anthropic's, Google's) is not called: a check should cost nothing and change
nothing, and its key is checked by the first run.

No vendor SDK is imported; the look is httpx2, as Ollama's is where no model is set.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import anyio
import httpx2

from meta_agent.errors import ModelNotConfigured
from meta_agent.providers.factory import GEMINI_BASE_URL, OPENAI_HOST
from meta_agent.providers.model_setting import (
    WHAT_TO_SET,
    default_model,
    ollama_url,
    parse_chain,
    parse_model,
    setting_problem,
)
from meta_agent.shared.addresses import refusal
from meta_agent.shared.text import one_line, printable, some_of
from meta_agent.shared.urls import loggable_url

ANTHROPIC_URL = "https://api.anthropic.com"  # where the anthropic SDK sends requests unless told otherwise
PROBE_TIMEOUT = 3.0  # seconds for a local server to answer its model list: it answers at once when it runs
PROBE_BYTES = 1_000_000  # of that list read at most: a model list is a few kB
MODELS_NAMED = 5  # models a line names of those an endpoint lists
NO_MODEL = (
    "a run needs the host's own model (a host of `meta-agent serve` that offers MCP sampling lends it) or a setting,"
    f" without which `meta-agent run` cannot start: {WHAT_TO_SET}"
)


# ready: a run can use it; failed: no run can; host: only a run a host asks for, with the host's own model (sampling).
ModelState = Literal["ready", "failed", "host"]


@dataclass(frozen=True, kw_only=True)
class ModelVerdict:
    """One model as `check` tells it: `model` (`openai:gpt-5.5`; "none" where none is set or found), its state, and
    why, in one line."""

    model: str
    state: ModelState
    detail: str


async def check_models(spec: str | None, environ: Mapping[str, str]) -> list[ModelVerdict]:
    """A verdict for each model of META_AGENT_MODEL (`spec`), in order; where it is not set, for the model a run
    would find (a provider's key, a running Ollama), or a failed "none" saying what to set."""
    spec = (spec or "").strip()
    if not spec:
        try:
            found = await default_model(environ)
        except ModelNotConfigured:
            return [ModelVerdict(model="none", state="host", detail=NO_MODEL)]
        verdict = await check_model(found, environ)
        return [ModelVerdict(model=found, state=verdict.state, detail=f"found: {verdict.detail}")]
    try:
        chain = parse_chain(spec)
    except ModelNotConfigured as exc:
        return [ModelVerdict(model=spec, state="failed", detail=str(exc).removeprefix(f"META_AGENT_MODEL={spec!r}: "))]
    return [await check_model(member, environ) for member in chain]


async def check_model(spec: str, environ: Mapping[str, str]) -> ModelVerdict:
    """The verdict on one model, `provider:model` (already parsed) or `sampling`."""
    provider, model = parse_model(spec)
    if provider == "sampling":
        return ModelVerdict(
            model=spec,
            state="host",
            detail="the host's own model: only under `meta-agent serve`, where the host offers MCP sampling;"
            " `meta-agent run` cannot use it",
        )
    problem = setting_problem(spec, environ)
    if problem is not None:
        return ModelVerdict(model=spec, state="failed", detail=problem.removeprefix(f"META_AGENT_MODEL={spec}: "))
    endpoint, key = _endpoint(provider, environ)
    if provider not in ("openai", "ollama") or not is_local(endpoint):  # only these speak the OpenAI model list
        keyed = f"{key} is {'set' if environ.get(key) else 'not set'}; " if key else ""
        remote = f"{_host(endpoint)} is not called by check (not on this machine or its network)"
        return ModelVerdict(model=spec, state="ready", detail=keyed + remote)
    setting = "OLLAMA_HOST" if provider == "ollama" else "OPENAI_BASE_URL"
    ok, detail = await _answers(endpoint, model, provider, environ.get(key) if key else None, setting)
    return ModelVerdict(model=spec, state="ready" if ok else "failed", detail=detail)


def _endpoint(provider: str, environ: Mapping[str, str]) -> tuple[str, str | None]:
    """Where `provider`'s requests go, and the variable of its key (None: it needs none)."""
    if provider == "ollama":
        return f"{ollama_url(environ)}/v1", None
    if provider == "openai":
        return environ.get("OPENAI_BASE_URL") or f"https://{OPENAI_HOST}/v1", "OPENAI_API_KEY"
    if provider == "anthropic":
        return environ.get("ANTHROPIC_BASE_URL") or ANTHROPIC_URL, "ANTHROPIC_API_KEY"
    return GEMINI_BASE_URL, "GEMINI_API_KEY"


def _host(url: str) -> str:
    return urlsplit(url).hostname or url


def is_local(url: str) -> bool:
    """Whether `url` is on this machine or its network: `localhost`, or an address inside a network (loopback,
    private, link-local). A name other than localhost is not looked up: a check makes no DNS query."""
    host = urlsplit(url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return refusal(address) is not None  # what a fetch may not reach is inside a network


async def _answers(base_url: str, model: str, provider: str, key: str | None, setting: str) -> tuple[bool, str]:
    """Whether the OpenAI-compatible server at `base_url` (which the variable `setting` names) answers its model
    list, and lists `model`; in words."""
    url = f"{base_url.rstrip('/')}/models"
    shown = loggable_url(url)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:  # the whole look bounded, not each read: a server that drips its answer is as good as none
        with anyio.fail_after(PROBE_TIMEOUT):
            async with httpx2.AsyncClient() as http, http.stream("GET", url, headers=headers) as got:
                status, body = got.status_code, await _head(got)
    except (TimeoutError, httpx2.TimeoutException):
        return False, f"{shown} did not answer within {PROBE_TIMEOUT:g} s"
    except httpx2.ConnectError:
        return False, f"nothing answers at {shown}: start the server, or point {setting} at it"
    except httpx2.HTTPError as exc:
        why = one_line(str(exc) or type(exc).__name__, 120)
        return False, f"{shown} cannot be read ({why}); {setting} points there"
    if status == 404:
        return False, f"{shown} answers HTTP 404: an OpenAI-compatible base URL usually ends in /v1"
    if status in (401, 403):
        return False, f"{shown} refuses the key (HTTP {status})"
    if status >= 400:
        return False, f"{shown} answers HTTP {status} (a server still loading its model answers 503)"
    return _listed(shown, model, provider, _model_ids(body))


def _listed(shown: str, model: str, provider: str, ids: list[str] | None) -> tuple[bool, str]:
    """The verdict on a model list: Ollama runs only the models pulled; another server may serve one model under any
    name (llama.cpp's llama-server), so a name it does not list is said, not failed."""
    if ids is None:
        return True, f"{shown} answers"
    named = [printable(one_line(name, 80)) for name in ids[: MODELS_NAMED + 1]]  # a server's text, shown safe
    listed = f"{shown} lists {some_of(named, MODELS_NAMED)}" if ids else f"{shown} lists no model"
    if model in ids or f"{model}:latest" in ids:
        return True, f"{shown} answers and lists {model}"
    if provider == "ollama":
        return False, f"{listed}, not {model}: `ollama pull {model}`"
    return True, f"{listed}, not {model}: llama-server answers to any name, other servers refuse one they do not list"


async def _head(response: httpx2.Response) -> bytes:
    """The first PROBE_BYTES of a response's body."""
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) >= PROBE_BYTES:
            break
    return bytes(body[:PROBE_BYTES])


def _model_ids(body: bytes) -> list[str] | None:
    """The model ids of an OpenAI-style list (`{"data": [{"id": ...}]}`); None if the body is not one."""
    try:
        data: Any = json.loads(body).get("data")
    except (ValueError, AttributeError, RecursionError):
        return None
    if not isinstance(data, list):
        return None
    return [item["id"] for item in data if isinstance(item, dict) and isinstance(item.get("id"), str)]
