"""What the wire formats share: the vendor SDKs' HTTP transport, their errors mapped to one typed line each, and the
explicit checks that read an answer, so a malformed one is a `ProviderError` naming the field, never a `KeyError`."""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from typing import Any

from meta_agent.errors import (
    ProviderAuthError,
    ProviderBadRequest,
    ProviderError,
    ProviderRateLimited,
    ProviderUnavailable,
)
from meta_agent.shared.text import one_line
from meta_agent.shared.urls import loggable_url
from meta_agent.shared.validation import JSON_KINDS, json_kind

# What the SDK raises reading a body that is not JSON: not JSON, not UTF-8, or nested deeper than Python's reader goes.
UNREADABLE = (json.JSONDecodeError, UnicodeDecodeError, RecursionError)
# Characters of an answer that is text, not JSON, quoted in the error.
QUOTED = 80
# Characters of a server's error message shown: a validation error naming every field fits (llama.cpp's server sends
# one such message over a dozen lines); a whole HTML error page does not.
DETAIL_SHOWN = 2000


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
    base_url = loggable_url(base_url)  # a gateway's key may ride in its query or user info
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
