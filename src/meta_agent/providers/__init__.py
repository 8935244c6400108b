"""Model providers: one module per wire format behind one `Provider` protocol, resolved from `provider:model`.

openai:MODEL     the official openai SDK (OPENAI_API_KEY, OPENAI_BASE_URL): the Responses API against OpenAI itself,
                 Chat Completions against any other OpenAI-compatible server (META_AGENT_OPENAI_API forces either)
ollama:MODEL     Chat Completions at Ollama's OpenAI-compatible /v1 (OLLAMA_HOST)
gemini:MODEL     Chat Completions at Gemini's OpenAI-compatible endpoint (GEMINI_API_KEY)
anthropic:MODEL  the official anthropic SDK, Messages with tools (ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL)
sampling         the host's own model through MCP sampling (given by the MCP front)

META_AGENT_MODEL may name a fallback chain, `openai:gpt-5.5,ollama:qwen3`: `parse_chain` reads it, and a model of
a chain that cannot be made here is `Unusable`, so the chain goes on past it.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from functools import partial
from typing import Any, Literal
from urllib.parse import urlsplit

import anyio
import httpx2

from meta_agent.core.messages import ModelRequest, ModelResponse
from meta_agent.core.provider import Provider
from meta_agent.errors import (
    ModelNotConfigured,
    ProviderAuthError,
    ProviderBadRequest,
    ProviderError,
    ProviderRateLimited,
    ProviderUnavailable,
)
from meta_agent.shared.text import one_line
from meta_agent.shared.validation import JSON_KINDS, json_kind

DEFAULT_OLLAMA_HOST = "http://127.0.0.1:11434"
OPENAI_HOST = "api.openai.com"  # where `openai:` speaks the Responses API unless told otherwise
GEMINI_BASE_URL = "https://generativelanguage.googleapis.com/v1beta/openai/"
# Current models the installed SDKs list and do not mark deprecated.
DEFAULT_MODELS = {"openai": "gpt-5.5", "anthropic": "claude-sonnet-5-5", "gemini": "gemini-2.5-flash"}
# An Ollama that does not answer this fast is not running.
OLLAMA_PROBE_TIMEOUT = 0.5

OpenAIApi = Literal["responses", "chat"]  # the wire formats of the OpenAI-compatible providers

CANNOT_SAMPLE = "this caller cannot sample (it needs MCP sampling with tools over a 2025-11-25 session)"
WHAT_TO_SET = (
    "set META_AGENT_MODEL (e.g. openai:gpt-5.5, anthropic:claude-sonnet-5-5, ollama:qwen3, gemini:gemini-2.5-flash)"
    " with its API key (OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY), or run Ollama at OLLAMA_HOST"
)


def parse_model(spec: str) -> tuple[str, str]:
    """Split `provider:model`; `sampling` has no model part.

    Raises:
        ModelNotConfigured: an unknown provider or a missing model name.
    """
    provider, _, model = spec.strip().partition(":")
    if provider == "sampling" and not model:
        return provider, ""
    if provider not in ("openai", "ollama", "gemini", "anthropic", "sampling"):
        raise ModelNotConfigured(
            f"META_AGENT_MODEL={spec!r}: unknown provider {provider!r} (use openai:, anthropic:, ollama:, gemini:"
            " or sampling)"
        )
    if not model:
        raise ModelNotConfigured(f"META_AGENT_MODEL={spec!r}: name the model after the colon, e.g. {provider}:NAME")
    return provider, model


def parse_chain(spec: str) -> list[str]:
    """The models of META_AGENT_MODEL, in order: one, or a comma-separated fallback chain; each one checked.

    Raises:
        ModelNotConfigured: an empty entry, or a model `parse_model` refuses.
    """
    members = [member.strip() for member in spec.split(",")]
    if len(members) > 1 and not all(members):
        raise ModelNotConfigured(
            f"META_AGENT_MODEL={spec!r}: an empty entry in the fallback chain; separate the models with single commas"
        )
    for member in members:
        parse_model(member)
    return members


def check_model_setting(spec: str | None, environ: Mapping[str, str], *, can_sample: bool) -> None:
    """Check META_AGENT_MODEL (`spec`) as far as it can be without a vendor SDK or the network, so that a command
    says what is wrong before it starts anything: the models named, the API key of each, `sampling` where the caller
    `can_sample` (a host can; `meta-agent run` cannot). A fallback chain fails only when none of its models can be
    used here (the others are passed, as `Unusable`). No model set is not checked here: `default_model` looks.

    Raises:
        ModelNotConfigured: a malformed setting, or no model of it usable here, saying what to set.
    """
    spec = (spec or "").strip()
    if not spec:
        return
    chain = parse_chain(spec)
    problems = [problem for member in chain if (problem := setting_problem(member, environ, can_sample)) is not None]
    if len(chain) == 1 and problems:
        raise ModelNotConfigured(problems[0])
    if len(problems) == len(chain):
        each = "; ".join(problem.removeprefix("META_AGENT_MODEL=") for problem in problems)
        raise ModelNotConfigured(f"META_AGENT_MODEL={spec!r}: no model of the chain can be used here: {each}")


def setting_problem(spec: str, environ: Mapping[str, str], can_sample: bool = True) -> str | None:
    """Why the one model `spec` (already parsed) cannot be made here, in one line naming what to set; None if it can.
    What `make_provider` and the providers' constructors refuse, said without importing a vendor SDK."""
    provider, model = parse_model(spec)
    named = f"META_AGENT_MODEL={provider}:{model}"
    if provider == "sampling":
        return None if can_sample else f"META_AGENT_MODEL=sampling: {CANNOT_SAMPLE}; {WHAT_TO_SET}"
    if provider == "anthropic" and not environ.get("ANTHROPIC_API_KEY"):
        return f"{named}: set ANTHROPIC_API_KEY"
    if provider == "gemini" and not environ.get("GEMINI_API_KEY"):
        return f"{named}: set GEMINI_API_KEY"
    if provider == "openai" and not environ.get("OPENAI_API_KEY") and not environ.get("OPENAI_BASE_URL"):
        return f"{named}: set OPENAI_API_KEY (or OPENAI_BASE_URL for a local server)"
    return None


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
        host = environ.get("OLLAMA_HOST") or DEFAULT_OLLAMA_HOST
        base_url = f"{_with_scheme(host)}/v1"
        return make(model, label="ollama", base_url=base_url, api_key="ollama", timeout=timeout, aiohttp=aiohttp)
    if provider == "gemini":
        gemini_key = environ["GEMINI_API_KEY"]  # there is one: `setting_problem` said so
        return make(
            model, label="gemini", base_url=GEMINI_BASE_URL, api_key=gemini_key, timeout=timeout, aiohttp=aiohttp
        )
    key = environ.get("OPENAI_API_KEY") or None
    return make(model, base_url=base_url, api_key=key, timeout=timeout, aiohttp=aiohttp)


def vendor_http_client(sdk: Any, aiohttp: bool) -> Any:
    """The `http_client` of an openai or anthropic SDK client: its aiohttp transport where `aiohttp` is asked for,
    else the SDK's own default (httpx2). `meta-agent serve` asks for it: under tens of concurrent runs, httpx2's
    connection pool looks at every pooled connection (a system call each) to place each request; measured when this
    was chosen, 50 requests at once to an endpoint on 127.0.0.1 cost 2.1 ms of CPU each through httpx2 and 1.0 ms
    through aiohttp (the CPU of a whole run against the code before: benchmarks/RESULTS.md, Concurrency). A one-shot
    `meta-agent run` does not: aiohttp takes a quarter of a second to import, more than it saves on a few requests.

    aiohttp warns of every request body over 1 MiB given as bytes (a long transcript), that it "might lock the event
    loop": the SDK's transport hands it bytes, and writing them is one buffered socket write. That warning is
    silenced, and no other."""
    if not aiohttp:
        return None
    warnings.filterwarnings("ignore", message="Sending a large body directly with raw bytes", category=ResourceWarning)
    return sdk.DefaultAioHttpClient()


class Unusable:
    """A model of a fallback chain that cannot be made here (its API key is not set, the caller cannot sample):
    each call fails as a refused key does, so the chain goes on with the next model and the progress says why."""

    def __init__(self, name: str, problem: str) -> None:
        self._name = name
        self._problem = problem

    @property
    def name(self) -> str:
        return self._name

    @property
    def accepts_images(self) -> bool:
        return False

    async def aclose(self) -> None:
        return None

    async def complete(self, request: ModelRequest) -> ModelResponse:
        raise ProviderAuthError(self._problem, brief="not configured")


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


async def default_model(environ: Mapping[str, str]) -> str:
    """The model a run uses where META_AGENT_MODEL is not set (and the caller cannot sample): the default model of
    the first provider whose API key is set; else the first model of an Ollama that answers at OLLAMA_HOST (a look of
    OLLAMA_PROBE_TIMEOUT at most).

    Raises:
        ModelNotConfigured: nothing usable, with exactly what to set.
    """
    for provider, key in (
        ("openai", "OPENAI_API_KEY"),
        ("anthropic", "ANTHROPIC_API_KEY"),
        ("gemini", "GEMINI_API_KEY"),
    ):
        if environ.get(key):
            return f"{provider}:{DEFAULT_MODELS[provider]}"
    model = await _ollama_model(environ.get("OLLAMA_HOST") or DEFAULT_OLLAMA_HOST)
    if model is not None:
        return f"ollama:{model}"
    raise ModelNotConfigured(f"no model is configured: {WHAT_TO_SET}")


async def made_provider(spec: str, environ: Mapping[str, str], **options: Any) -> Provider:
    """`make_provider` on a worker thread: importing a vendor's SDK takes half a second, and the event loop must go
    on serving meanwhile (children finishing their handshake, other callers)."""
    return await anyio.to_thread.run_sync(partial(make_provider, spec, environ, **options))


async def _ollama_model(host: str) -> str | None:
    """The first model a running Ollama has, or None when none answers."""
    try:
        async with httpx2.AsyncClient(timeout=OLLAMA_PROBE_TIMEOUT) as http:
            response = await http.get(f"{_with_scheme(host)}/api/tags")
            response.raise_for_status()
            models = response.json().get("models") or []
    except (httpx2.HTTPError, ValueError, AttributeError):
        return None
    names = [m.get("name") for m in models if isinstance(m, dict) and m.get("name")]
    return names[0] if names else None


def _with_scheme(host: str) -> str:
    host = host.rstrip("/")
    return host if "://" in host else f"http://{host}"


def _refusal(exc: BaseException) -> OSError | None:
    """The error of the operating system under an SDK's connection error (a refused connection), if there is one.
    The SDKs' aiohttp transport reports a refused connection as a connect timeout, with the refusal as its cause."""
    cause = exc.__cause__
    while cause is not None:
        if isinstance(cause, OSError) and not isinstance(cause, TimeoutError):
            return cause
        cause = cause.__cause__
    return None


def provider_error(exc: Exception, sdk: object, *, name: str, key_variable: str, base_url: str) -> ProviderError:
    """Map an exception of the openai or anthropic SDK (same generated exception tree) to one typed, one-line error
    that ends with the server's own message, whole (joined into one line; cut only past DETAIL_SHOWN characters).

    The SDKs have already retried what is transient (connection errors, 408, 409, 429, 5xx) by the time this runs.
    """
    status = getattr(exc, "status_code", None)
    detail = one_line(_error_text(exc), DETAIL_SHOWN)
    if isinstance(exc, (sdk.AuthenticationError, sdk.PermissionDeniedError)):  # type: ignore[attr-defined]
        return ProviderAuthError(
            f"{name}: the API key was refused (HTTP {status}); check {key_variable}: {detail}",
            brief=f"HTTP {status}, the API key was refused",
        )
    if isinstance(exc, sdk.RateLimitError):  # type: ignore[attr-defined]
        return ProviderRateLimited(f"{name}: rate limited (HTTP 429) after retries: {detail}", brief="HTTP 429")
    refused = _refusal(exc)
    if isinstance(exc, sdk.APITimeoutError) and refused is None:  # type: ignore[attr-defined]
        return ProviderUnavailable(f"{name}: no answer from {base_url} in time (after retries)", brief="timed out")
    if isinstance(exc, sdk.APIConnectionError):  # type: ignore[attr-defined]
        detail = detail if refused is None else one_line(str(refused), DETAIL_SHOWN)
        return ProviderUnavailable(
            f"{name}: cannot connect to {base_url} (after retries): {detail}", brief="cannot connect"
        )
    if isinstance(exc, sdk.APIStatusError) and status is not None and status >= 500:  # type: ignore[attr-defined]
        return ProviderUnavailable(
            f"{name}: the provider failed (HTTP {status}) after retries: {detail}", brief=f"HTTP {status}"
        )
    if isinstance(exc, sdk.APIStatusError):  # type: ignore[attr-defined]
        return ProviderBadRequest(f"{name}: the request was refused (HTTP {status}): {detail}", brief=f"HTTP {status}")
    if isinstance(exc, sdk.APIResponseValidationError):  # type: ignore[attr-defined]
        return ProviderError(f"{name}: the provider's answer was malformed: {detail}")
    return ProviderError(f"{name}: {type(exc).__name__}: {detail}")


# What the SDK raises reading a body that is not JSON: not JSON, not UTF-8, or nested deeper than Python's reader goes.
UNREADABLE = (json.JSONDecodeError, UnicodeDecodeError, RecursionError)
# Characters of an answer that is text, not JSON, quoted in the error.
QUOTED = 80
# Characters of a server's error message shown: a validation error naming every field fits (llama.cpp's server sends
# one such message over a dozen lines); a whole HTML error page does not.
DETAIL_SHOWN = 2000


class WrongShape(Exception):
    """A provider's answer that is not its wire format, found by the adapter's explicit checks; `str()` says what is
    wrong, naming the field. The adapter raises it as a `ProviderError` naming the provider (`answer_error`)."""


def answer_error(name: str, problem: Exception) -> ProviderError:
    """The one-line error for an answer that could not be read (UNREADABLE) or has the wrong shape (WrongShape)."""
    if isinstance(problem, WrongShape):
        return ProviderError(f"{name}: {problem}")
    if isinstance(problem, RecursionError):
        return ProviderError(f"{name}: the provider's answer was malformed: nested too deeply to read")
    detail = one_line(str(problem), DETAIL_SHOWN)
    return ProviderError(f"{name}: the provider's answer was malformed: not JSON ({detail})")


def answer_object(answer: object, required: str) -> dict[str, Any]:
    """The answer, if it is a JSON object with the key `required`.

    Raises:
        WrongShape: another JSON value, text, or an object without `required` (one that says it is an error, as
            some proxies send with status 200, is that error).
    """
    if isinstance(answer, str):
        raise malformed(f"expected a JSON object, got text: {one_line(answer, QUOTED)!r}")
    if not isinstance(answer, dict):
        raise malformed(f"expected a JSON object, got {json_kind(answer)}")
    if required not in answer:
        error = _body_message(answer)
        if error is not None:
            raise WrongShape(f"the provider answered with an error: {one_line(error, DETAIL_SHOWN)}")
        raise malformed(f"no {required!r} (the keys are: {', '.join(sorted(answer))[:QUOTED] or 'none'})")
    return answer


def field(value: Mapping[str, Any], key: str, kinds: type | tuple[type, ...], where: str) -> Any:
    """`value[key]` if it is of `kinds` (include `type(None)` where null or absence is allowed); `where`: the path
    of `value` in the answer, for the error.

    Raises:
        WrongShape: naming the field and what it is instead.
    """
    path = f"{where}.{key}" if where else key
    return checked(value.get(key), kinds, path, missing=key not in value)


def checked(value: Any, kinds: type | tuple[type, ...], where: str, *, missing: bool = False) -> Any:
    """`value` if it is of `kinds` (a JSON true or false is no number).

    Raises:
        WrongShape: naming `where` and what it is instead.
    """
    if isinstance(value, kinds) and not isinstance(value, bool):
        return value
    expected = " or ".join(JSON_KINDS[kind] for kind in (kinds if isinstance(kinds, tuple) else (kinds,)))
    raise malformed(f"{where} is {'missing' if missing else json_kind(value)}; expected {expected}")


def token_count(usage: Mapping[str, Any], key: str, where: str = "usage") -> int:
    """A token count of the answer's usage (at `where`); absent or null is 0.

    Raises:
        WrongShape: a count that is not a whole number of at least 0.
    """
    count = field(usage, key, (int, type(None)), where) or 0
    if count < 0:
        raise malformed(f"{where}.{key} is {count}; expected a count of at least 0")
    return count


def malformed(problem: str) -> WrongShape:
    """What is wrong with an answer, said the one way."""
    return WrongShape(f"the provider's answer was malformed: {problem}")


def _error_text(exc: Exception) -> str:
    """What the server said, read from the body the SDK kept (its own message names only the status where the body
    is not the vendor's error object); else the SDK's message."""
    body = getattr(exc, "body", None)
    said = _body_message(body)
    if said is None and isinstance(body, dict | list) and body:
        said = json.dumps(body, ensure_ascii=False)  # JSON of a shape we do not know: shown as it is
    return said or getattr(exc, "message", None) or str(exc)


def _body_message(body: object) -> str | None:
    """The server's own error text: `{"error": {"message": ...}}` (both vendors; the SDKs keep only the inner
    object), `{"error": "..."}`, `{"message": ...}`, FastAPI's `{"detail": ...}` (text, or a list of field
    errors), or a body that is only text (a JSON string, or plain text)."""
    if isinstance(body, str):
        return body.strip() or None
    if not isinstance(body, dict):
        return None
    inner = body.get("error")
    found = body if not isinstance(inner, dict) else inner
    for key in ("message", "detail", "error"):
        text = _message_text(found.get(key))
        if text is not None:
            return text
    return None


def _message_text(value: object) -> str | None:
    """An error message: text, or a list of messages or of field errors (`{"loc": [...], "msg": ...}`) joined."""
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, list):
        return "; ".join(filter(None, (_field_error(item) for item in value))) or None
    return None


def _field_error(item: object) -> str | None:
    if isinstance(item, str):
        return item
    if isinstance(item, dict) and isinstance(item.get("msg"), str):
        loc = item.get("loc")
        where = ".".join(str(part) for part in loc) if isinstance(loc, list) else ""
        return f"{where}: {item['msg']}" if where else item["msg"]
    return None
