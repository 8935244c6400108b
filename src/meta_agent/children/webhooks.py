"""The webhooks of servers.json as tools (README, Webhooks): each entry is the tool `webhooks.NAME`, which sends its
validated arguments to the entry's URL (as a JSON body, or as query parameters with GET) and returns the answer.

`Webhooks` is shaped like a child server for the toolbox: a name, MCP tool definitions, and `call`, which returns an
MCP tool result, so a webhook is listed, selected, trusted, approved and called the way a child's tool is. What it
answers: JSON or text as text, an image as an image; any other status than 2xx is a tool error with the status and the
start of the body (a redirect is not followed: the URL to call is the one configured). A timeout, a connection that
fails and an answer over `MAX_ANSWER_BYTES` raise `ChildError`s, which the model sees as tool errors in one line.

A GET adds the arguments to the query of the configured URL and never changes it: an argument named as one of the
URL's own parameters (`token` beside `?token=...`) is a tool error, and nothing is sent. The URL's path, query and
user info and every header value are secrets (an n8n webhook's path is its key): they are kept out of every log line
(meta_agent.records.logs.hide) and out of what the model is told, which names a webhook by its name and host only.

One HTTP client serves every call of the process's webhooks (its connections are reused); it is made at the first
call, so a configuration with webhooks costs nothing until one is called, and closed with the pool that holds it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio
import httpx2
import mcp.types as t

from meta_agent.config.servers import WebhookEntry
from meta_agent.core.policy import TrustLevel
from meta_agent.core.tools import WEBHOOKS, ProgressFn
from meta_agent.errors import ChildError, ChildTimeout, ChildUnavailable
from meta_agent.records.logs import hide, redacted
from meta_agent.shared.text import one_line
from meta_agent.version import __version__

if TYPE_CHECKING:
    from meta_agent.children.questions import Questions

# An answer longer than this is dropped (a tool result the model sees is cut far shorter anyway).
MAX_ANSWER_BYTES = 4 * 1024 * 1024
# Characters of a failed answer's body quoted in its error.
BODY_SHOWN = 200
# Parts of a webhook's URL or headers this long that hold a digit, or twice as long, are taken for keys (_key_shaped).
KEY_SHAPED_MIN = 8
# What the HTTP library raises about a request or its URL (InvalidURL and StreamError are not HTTPErrors).
_HTTP_ERRORS = (httpx2.HTTPError, httpx2.InvalidURL, httpx2.StreamError)
_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/x-www-form-urlencoded")


class Webhooks:
    """The configured webhooks as one virtual child server named `webhooks`; `update` takes a reload's entries."""

    name = WEBHOOKS

    def __init__(self, entries: Mapping[str, WebhookEntry]) -> None:
        self.entries: dict[str, WebhookEntry] = dict(entries)
        self._http: httpx2.AsyncClient | None = None
        _hide_secrets(self.entries)

    @property
    def tools(self) -> tuple[t.Tool, ...]:
        """The tools of the enabled webhooks, in the file's order."""
        return tuple(_tool(name, entry) for name, entry in self.entries.items() if not entry.disabled)

    @property
    def disabled(self) -> tuple[t.Tool, ...]:
        """The tools of the disabled webhooks: known, described, never called."""
        return tuple(_tool(name, entry) for name, entry in self.entries.items() if entry.disabled)

    @property
    def trust(self) -> dict[str, TrustLevel]:
        """The levels the entries set, by webhook name (as a child's `trust` map is keyed by its own tool names)."""
        return {name: entry.trust for name, entry in self.entries.items() if entry.trust is not None}

    def update(self, entries: Mapping[str, WebhookEntry]) -> tuple[str, ...]:
        """Take the webhooks of a reloaded servers.json; returns the names added, removed or changed. A call in
        flight goes on with the entry it started with."""
        changed = {name for name in {*self.entries, *entries} if self.entries.get(name) != entries.get(name)}
        self.entries = dict(entries)
        _hide_secrets(self.entries)
        return tuple(sorted(changed))

    async def aclose(self) -> None:
        if self._http is not None:
            http, self._http = self._http, None
            await http.aclose()

    async def call(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        on_progress: ProgressFn | None = None,
        questions: Questions | None = None,
    ) -> t.CallToolResult:
        """Send `arguments` to webhook `tool` and return its answer, bounded by the entry's `timeout`. A webhook asks
        nothing and reports no progress: `on_progress` and `questions` are there for the shape a child has.

        Raises:
            ChildUnavailable: no such enabled webhook now, or the connection could not be made; nothing was sent.
            ChildTimeout: no whole answer within `timeout`; the request was abandoned.
            ChildError: a GET's argument names a parameter of the URL's own query (nothing was sent), the connection
                failed during the exchange, or the answer is too large.
        """
        entry = self.entries.get(tool)
        if entry is None:  # a reload removed it while a run went on with the tools it started with
            raise ChildUnavailable(WEBHOOKS, f"{tool} was removed from the configuration")
        if entry.disabled:
            raise ChildUnavailable(WEBHOOKS, f"{tool} is disabled in servers.json")
        try:
            with anyio.fail_after(entry.timeout):
                status, reason, content_type, body = await self._exchange(tool, entry, arguments)
        except TimeoutError:
            raise ChildTimeout(
                WEBHOOKS, f"{tool} did not answer within {entry.timeout:g} s; the request was abandoned"
            ) from None
        if not 200 <= status < 300:
            return _failed(status, reason, content_type, body)
        return t.CallToolResult(content=[_content(status, content_type, body)])

    async def _exchange(
        self, tool: str, entry: WebhookEntry, arguments: Mapping[str, Any]
    ) -> tuple[int, str, str, bytes]:
        """The request sent and the answer read whole: its status, reason phrase, content type and body."""
        http = self._client()
        url = httpx2.URL(entry.url)
        if entry.method == "GET":
            request = http.build_request("GET", _added(tool, url, arguments), headers=entry.headers)
        else:
            request = http.build_request(entry.method, url, json=dict(arguments), headers=entry.headers)
        try:
            response = await http.send(request, stream=True)
        except httpx2.ConnectError as exc:
            raise ChildUnavailable(
                WEBHOOKS, f"{tool}: cannot connect to {_host(url)}: {_why(exc)}; nothing was sent"
            ) from None
        except _HTTP_ERRORS as exc:
            raise ChildError(
                WEBHOOKS, f"{tool}: the request to {_host(url)} failed: {_why(exc)}; it may have run"
            ) from None
        try:
            body = await _read(tool, response)
        except _HTTP_ERRORS as exc:
            raise ChildError(WEBHOOKS, f"{tool}: its answer broke off: {_why(exc)}; it may have run") from None
        finally:
            await response.aclose()
        return response.status_code, response.reason_phrase, response.headers.get("content-type", ""), body

    def _client(self) -> httpx2.AsyncClient:
        if self._http is None:
            # No timeout of its own (each call's `timeout` bounds the whole exchange) and no redirects followed: a
            # redirect is an answer, told to the model, not a second request to somewhere else.
            self._http = httpx2.AsyncClient(
                timeout=None, follow_redirects=False, headers={"user-agent": f"meta-agent/{__version__}"}
            )
        return self._http


def _tool(name: str, entry: WebhookEntry) -> t.Tool:
    """A webhook as an MCP tool: not read-only (it changes things somewhere, so plan mode never sees it and the
    default trust is ask), open world. Without a description of its own, one that names it: the model needs some."""
    return t.Tool(
        name=name,
        description=entry.description or f"Calls the {name} webhook ({entry.method}).",
        input_schema=entry.parameters,
        annotations=t.ToolAnnotations(read_only_hint=False, open_world_hint=True),
    )


def _added(tool: str, url: httpx2.URL, arguments: Mapping[str, Any]) -> httpx2.URL:
    """`url` with the arguments of a GET added after its own query, which is kept byte for byte.

    Raises:
        ChildError: an argument is named as a parameter of the URL's own query (`token` beside `?token=...`): an
            argument may add to what the configuration sends, never replace it.
    """
    own = {name for name, _ in url.params.multi_items()}
    if clash := sorted(own.intersection(arguments)):
        said = f"argument {clash[0]!r} is" if len(clash) == 1 else f"arguments {', '.join(map(repr, clash))} are"
        raise ChildError(
            WEBHOOKS, f"{tool}: the {said} set by the webhook's own URL and cannot be given; nothing was sent"
        )
    added = str(httpx2.QueryParams(_query(arguments))).encode("ascii")
    if not added:
        return url
    return url.copy_with(query=b"&".join(part for part in (url.query, added) if part))


def _query(arguments: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The arguments of a GET as query parameters: a list as the parameter repeated, an object as its JSON text,
    true and false as JSON writes them."""
    pairs: list[tuple[str, str]] = []
    for key, value in arguments.items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str):
                pairs.append((key, item))
            elif item is not None:
                pairs.append((key, json.dumps(item, ensure_ascii=False)))
    return tuple(pairs)


async def _read(tool: str, response: httpx2.Response) -> bytes:
    """The whole body, or a ChildError past MAX_ANSWER_BYTES (said before reading when the length is announced)."""
    too_large = ChildError(WEBHOOKS, f"{tool} answered more than {MAX_ANSWER_BYTES:,} bytes; the answer was dropped")
    announced = response.headers.get("content-length", "")
    if announced.isdigit() and int(announced) > MAX_ANSWER_BYTES:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def _content(status: int, content_type: str, body: bytes) -> t.ContentBlock:
    """A 2xx answer as MCP content: an image as an image, anything else as text (JSON as its JSON text)."""
    media = _media(content_type)
    if media.startswith("image/") and body:
        return t.ImageContent(type="image", data=base64.b64encode(body).decode("ascii"), mime_type=media)
    if not body:
        return t.TextContent(type="text", text=f"(HTTP {status}, no content)")
    if not _textual(media):
        return t.TextContent(type="text", text=f"[answer: {media}, {len(body):,} bytes, not shown]")
    return t.TextContent(type="text", text=redacted(_text(content_type, body)))  # an echo of the URL: hidden


def _failed(status: int, reason: str, content_type: str, body: bytes) -> t.CallToolResult:
    """A non-2xx answer as a tool error: the status, and the start of a textual body on one line (a secret of the
    webhook it quotes, as an error page may quote the URL, redacted)."""
    said = f"HTTP {status}{f' {reason}' if reason else ''}"
    if 300 <= status < 400:
        said += " (a redirect, not followed: set the webhook's url to where it points)"
    shown = one_line(redacted(_text(content_type, body)), BODY_SHOWN) if _textual(_media(content_type)) else ""
    text = f"the webhook answered {said}{f': {shown}' if shown else ''}"
    return t.CallToolResult(content=[t.TextContent(type="text", text=text)], is_error=True)


def _media(content_type: str) -> str:
    return content_type.split(";")[0].strip().lower()


def _textual(media: str) -> bool:
    """Whether a body of this media type reads as text (no type said: taken as text, as most webhooks mean it)."""
    return not media or media.startswith(_TEXT_TYPES) or media.endswith(("+json", "+xml"))


def _text(content_type: str, body: bytes) -> str:
    """The body decoded by the charset its content type names, else UTF-8; bytes that do not decode replaced."""
    charset = "utf-8"
    for parameter in content_type.split(";")[1:]:
        key, _, value = parameter.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip('"')
    try:
        return body.decode(charset, "replace")
    except LookupError:  # a charset Python does not know
        return body.decode("utf-8", "replace")


def _why(exc: BaseException) -> str:
    """An HTTP library's error in one line, without the webhook's secrets (an error may quote its URL)."""
    return one_line(redacted(str(exc)), BODY_SHOWN) or type(exc).__name__


def _host(url: httpx2.URL) -> str:
    """How a webhook's address is named to the model and in the log: its host and port, never its path or query."""
    return f"{url.host}:{url.port}" if url.port is not None else url.host


def _hide_secrets(entries: Mapping[str, WebhookEntry]) -> None:
    """Keep each webhook's secrets (`secrets_of`) out of every log line, error text and answer the model reads."""
    hide(secrets_of(entries))


def secrets_of(entries: Mapping[str, WebhookEntry]) -> list[str]:
    """Each webhook's URL path, query, user info and header values, each whole, and the parts of them shaped like a
    key (a page or a log line may quote a path's last segment alone)."""
    secrets: list[str] = []
    for entry in entries.values():
        try:
            url = httpx2.URL(entry.url)
        except httpx2.InvalidURL:  # a disabled entry's URL, its ${VAR}s left unexpanded: never called
            continue
        path = url.raw_path.split(b"?")[0].decode("ascii")
        secrets += [path, url.path, url.query.decode("ascii"), url.userinfo.decode("ascii"), url.password or ""]
        secrets += entry.headers.values()
        parts = [*url.path.split("/"), *(value for _, value in url.params.multi_items())]
        parts += (word for value in entry.headers.values() for word in value.split())
        secrets += filter(_key_shaped, parts)
    return secrets


def _key_shaped(part: str) -> bool:
    """Whether a part of a URL or a header value looks like a key (`a1b2c3d4`, a UUID, a long token) rather than a
    word (`hooks`, `general`), which hiding would blank in every log line that holds it."""
    return len(part) >= KEY_SHAPED_MIN and (any(c.isdigit() for c in part) or len(part) >= 2 * KEY_SHAPED_MIN)
