"""`servers.json`: the child servers and webhooks the user configures.

`servers.json` is the `mcpServers` map that Claude Desktop and Cursor use, plus optional policy keys per server
(README, servers.json), and a `webhooks` map beside it: each entry an HTTP endpoint offered as the tool `webhooks.NAME`.
Every problem is a `ConfigError` whose text is one line: the file, the JSON path, the problem.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from meta_agent.core.policy import TrustLevel
from meta_agent.core.tools import WEBHOOKS
from meta_agent.errors import ConfigError
from meta_agent.shared.json_errors import invalid_json
from meta_agent.shared.text import first_line, one_line
from meta_agent.shared.urls import loggable_url
from meta_agent.shared.validation import json_kind, json_path, refusal

SERVER_NAME = re.compile(r"[A-Za-z0-9_-]+")
# A glob over tool names: the characters of a tool name plus fnmatch's wildcards.
GLOB = re.compile(r"[A-Za-z0-9._*?\[\]!/-]+")
VARIABLE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")
# `${META_AGENT_PYTHON}` is the Python that runs meta-agent (sys.executable), whatever the environment says. A host
# (Claude Desktop, Cursor, VS Code) starts us with its own PATH, where `python3` is some other Python that lacks the
# child's package; this names ours in the `${...}` spelling servers.json already has, where rewriting a bare
# `python3` would be magic that a reader of the file cannot see.
OWN_PYTHON = "META_AGENT_PYTHON"

DEFAULT_TIMEOUT = 60.0
# An HTTP header's name (a token, RFC 9110) and a value httpx can send as it is.
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
HEADER_VALUE = re.compile(r"[\x20-\x7e\t]*")
# What a webhook takes when its entry gives no `parameters`: an object, with nothing required.
ANY_OBJECT: dict[str, Any] = {"type": "object", "properties": {}}
# Seconds a child may take to start (connect, initialize, list its tools) before it is marked failed.
DEFAULT_START_TIMEOUT = 30.0


def check_glob(pattern: str) -> str:
    """Return `pattern` if it is a usable glob over tool names.

    Raises:
        ValueError: the pattern is empty, has characters no tool name has, or an unclosed `[`.
    """
    if not GLOB.fullmatch(pattern):
        raise ValueError(f"bad pattern {pattern!r}: use tool-name characters (A-Z a-z 0-9 . _ -) and * ? [...]")
    if pattern.count("[") != pattern.count("]"):
        raise ValueError(f"bad pattern {pattern!r}: unbalanced [ ]")
    return pattern


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ToolFilter(_Strict):
    """Which of a child's own tools meta-agent offers: allowed by `allow` and not matched by `deny`."""

    allow: tuple[str, ...] = ("*",)
    deny: tuple[str, ...] = ()

    @field_validator("allow", "deny", mode="before")
    @classmethod
    def _list(cls, value: Any) -> Any:
        if not isinstance(value, (list, tuple)):
            raise ValueError("expected a list of glob patterns")
        return tuple(value)

    @field_validator("allow", "deny")
    @classmethod
    def _globs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(check_glob(p) for p in value)


class ServerEntry(_Strict):
    """One entry of `mcpServers`: a stdio child (`command`) or a streamable-HTTP child (`url`)."""

    # `type` is accepted so entries copied from VS Code or Cursor load; it must agree with command/url.
    type: Literal["stdio", "http", "streamable-http", "streamableHttp"] | None = None
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    disabled: bool = False
    tools: ToolFilter = ToolFilter()
    trust: dict[str, TrustLevel] = Field(default_factory=dict)
    timeout: float = Field(default=DEFAULT_TIMEOUT, gt=0, le=86_400)
    # Globs over the child's own tool names that stay in the model's schema when tool search is on.
    pin: tuple[str, ...] = ()

    @field_validator("args", mode="before")
    @classmethod
    def _args(cls, value: Any) -> Any:
        if not isinstance(value, (list, tuple)):
            raise ValueError("expected a list of strings")
        return tuple(value)

    @field_validator("pin", mode="before")
    @classmethod
    def _pin(cls, value: Any) -> Any:
        if not isinstance(value, (list, tuple)):
            raise ValueError("expected a list of glob patterns over the server's own tool names")
        return tuple(value)

    @field_validator("pin")
    @classmethod
    def _pin_globs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            check_glob(pattern)
            if "." in pattern:
                own = pattern.split(".", 1)[1]
                raise ValueError(f"pin pattern {pattern!r} has a dot: write the server's own tool name ({own!r})")
        return value

    @field_validator("trust")
    @classmethod
    def _trust_globs(cls, value: dict[str, TrustLevel]) -> dict[str, TrustLevel]:
        for pattern in value:
            check_glob(pattern)
            if "." in pattern:
                own = pattern.split(".", 1)[1]
                raise ValueError(f"trust pattern {pattern!r} has a dot: write the server's own tool name ({own!r})")
        return value

    @field_validator("command", "url")
    @classmethod
    def _not_empty(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be empty")
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> ServerEntry:
        if self.command is not None and self.url is not None:
            raise ValueError("has both `command` (stdio) and `url` (HTTP); keep one")
        if self.command is None and self.url is None:
            raise ValueError("needs `command` (a stdio server) or `url` (a streamable-HTTP server)")
        if self.url is not None:
            if self.type == "stdio":
                raise ValueError('has `url` but `"type": "stdio"`')
            if self.args or self.env or self.cwd is not None:
                raise ValueError("`args`, `env` and `cwd` are for stdio servers; this one has `url`")
            if not re.match(r"https?://", self.url):
                raise ValueError(f"`url` must start with http:// or https://, got {loggable_url(self.url)!r}")
        if self.command is not None:
            if self.type not in (None, "stdio"):
                raise ValueError(f'has `command` but `"type": "{self.type}"`')
            if self.headers:
                raise ValueError("`headers` are for HTTP servers; this one has `command`")
        return self

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command is not None else "http"


class WebhookEntry(_Strict):
    """One entry of `webhooks`: an HTTP endpoint (an n8n or Zapier workflow, a CI trigger) offered as a tool whose
    validated arguments it receives as JSON (as query parameters with GET)."""

    url: str
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "POST"
    headers: dict[str, str] = Field(default_factory=dict)
    description: str | None = None  # None: a default naming the webhook (webhooks.py)
    parameters: dict[str, Any] = Field(default_factory=lambda: dict(ANY_OBJECT))
    timeout: float = Field(default=DEFAULT_TIMEOUT, gt=0, le=86_400)
    trust: TrustLevel | None = None  # None: the default of a tool that is not read-only, ask
    disabled: bool = False

    @field_validator("method", mode="before")
    @classmethod
    def _method(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not HEADER_NAME.fullmatch(name):
                raise ValueError(f"bad header name {name!r}: use letters, digits and - (an HTTP token)")
            if not HEADER_VALUE.fullmatch(text):  # the value is not quoted back: it may hold a secret
                raise ValueError(f"the value of header {name!r} must be printable ASCII on one line")
        return value

    @field_validator("description")
    @classmethod
    def _description(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be empty (leave it out for a default naming the webhook)")
        return value

    @field_validator("parameters")
    @classmethod
    def _parameters(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type") != "object":
            raise ValueError('must be the JSON Schema of an object (with "type": "object"): the tool\'s arguments')
        problem = _schema_problem(value)
        if problem is not None:
            raise ValueError(f"not a valid JSON Schema: {problem}")
        return value

    @model_validator(mode="after")
    def _url(self) -> WebhookEntry:
        if self.disabled and "${" in self.url:  # left unexpanded: its variables may be unset while it is off
            return self
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in self.url):
            raise ValueError(f"`url` must be an http:// or https:// URL with a host, got {loggable_url(self.url)!r}")
        try:
            parts.port  # noqa: B018 (reading it checks it)
        except ValueError as exc:
            raise ValueError(f"`url` has a bad port: {exc}") from None
        return self

    @property
    def origin(self) -> str:
        """`https://hooks.example:8443`: where the webhook goes, shown without the credentials, path and query of its
        URL, which may be its secret (an n8n webhook's path is)."""
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


def _schema_problem(schema: dict[str, Any]) -> str | None:
    """What makes `schema` unusable as a JSON Schema (by the draft its `$schema` names, else 2020-12), in one line;
    None when it is usable. Checked as the loop checks a tool's schema before it validates arguments with it."""
    import jsonschema  # here, not at the top: most configurations have no webhook, and `--help` must stay quick

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = json_path(list(exc.absolute_path))
        at = "" if where == "(top level)" else f" (at {where})"
        return f"{one_line(exc.message, 160)}{at}"
    return None


class ServersFile(_Strict):
    """The whole file: the servers and the webhooks (README, servers.json)."""

    mcpServers: dict[str, ServerEntry]
    webhooks: dict[str, WebhookEntry] = Field(default_factory=dict)


class Servers(dict[str, ServerEntry]):
    """A servers.json as loaded: its `mcpServers` by name, as the plain dict every caller already takes, and its
    `webhooks` beside them. One value, so the webhooks go wherever the servers are passed (the command line, the MCP
    front, the engine, a reload) without a second argument at each step."""

    def __init__(
        self, servers: Mapping[str, ServerEntry] | None = None, webhooks: Mapping[str, WebhookEntry] | None = None
    ) -> None:
        super().__init__(servers or {})
        self.webhooks: dict[str, WebhookEntry] = dict(webhooks or {})


def webhooks_of(servers: Mapping[str, ServerEntry]) -> dict[str, WebhookEntry]:
    """The webhooks loaded with `servers` (none when they are a plain mapping of servers)."""
    return dict(servers.webhooks) if isinstance(servers, Servers) else {}


def load_servers(path: Path, environ: Mapping[str, str]) -> Servers:
    """Read and check `servers.json`, expanding `${VAR}` and `${VAR:-default}` in enabled servers and webhooks.

    Args:
        path: the file; a relative path is taken from the working directory.
        environ: where `${VAR}` is looked up (normally `os.environ`).

    Returns:
        The servers by name (a dict), with the file's webhooks beside them (`.webhooks`).

    Raises:
        ConfigError: one line naming the file, the JSON path and the problem.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        # A host starts us in a directory of its choosing: say which one a relative path was looked for in.
        where = "" if path.is_absolute() else f" in the working directory {Path.cwd()}"
        raise ConfigError(f"{path}: no such file{where} (pass --config PATH or set META_AGENT_CONFIG)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    return parse_servers(text, str(path), environ)


def parse_servers(text: str, source: str, environ: Mapping[str, str]) -> Servers:
    """Parse the text of a servers file; `source` names it in errors.

    Raises:
        ConfigError: one line naming the source, the JSON path and the problem.
    """
    try:
        raw = json.loads(text.removeprefix("\ufeff"), object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise ConfigError(invalid_json(source, exc)) from None
    except _DuplicateKey as exc:
        raise ConfigError(f"{source}: key {exc.args[0]!r} appears twice in one object") from None
    except (ValueError, RecursionError) as exc:  # a number too long to convert, or nesting too deep
        raise ConfigError(f"{source}: invalid JSON: {first_line(str(exc)) or type(exc).__name__}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f'{source}: expected a JSON object with "mcpServers", got {json_kind(raw)}')
    if WEBHOOKS in raw:  # a file of webhooks alone needs no servers
        raw.setdefault("mcpServers", {})
    _expand_entries(raw, "mcpServers", source, environ)
    _expand_entries(raw, WEBHOOKS, source, environ)
    try:
        parsed = ServersFile.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {refusal(exc, known=_known_keys)}") from None
    if WEBHOOKS in parsed.mcpServers and parsed.webhooks:
        raise ConfigError(
            f"{source}: {json_path(['mcpServers', WEBHOOKS])}: a server named {WEBHOOKS!r} beside the webhooks map: "
            f"both would name their tools {WEBHOOKS}.*; rename the server"
        )
    return Servers(parsed.mcpServers, parsed.webhooks)


# Why a name may not have other characters, by the map it names an entry of.
_NAME_RULES = {
    "mcpServers": ("server", "the dot separates server and tool"),
    WEBHOOKS: ("webhook", f"the tool is {WEBHOOKS}.NAME"),
}


def _expand_entries(raw: dict[str, Any], key: str, source: str, environ: Mapping[str, str]) -> None:
    """Check the names of the entries of `raw[key]` and expand the variables of those enabled, in place."""
    entries = raw.get(key)
    if not isinstance(entries, dict):
        return  # validation names what it is instead
    noun, why = _NAME_RULES[key]
    for name, entry in entries.items():
        where = f"{source}: {json_path([key, name])}"
        if not SERVER_NAME.fullmatch(name):
            raise ConfigError(f"{where}: bad {noun} name {name!r}: use letters, digits, '_' and '-' ({why})")
        if isinstance(entry, dict) and entry.get("disabled") is not True:
            entries[name] = _expand_raw(entry, where, environ)


class _DuplicateKey(Exception):
    pass


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _expand_raw(entry: dict[str, Any], where: str, environ: Mapping[str, str]) -> dict[str, Any]:
    """Expand variables in the string fields of one raw entry; other types are left for validation to name."""
    out = dict(entry)
    for key in ("command", "cwd", "url"):
        if isinstance(out.get(key), str):
            out[key] = expand(out[key], f"{where}.{key}", environ)
    if isinstance(out.get("args"), list):
        out["args"] = [
            expand(a, f"{where}.args[{i}]", environ) if isinstance(a, str) else a for i, a in enumerate(out["args"])
        ]
    for key in ("env", "headers"):
        if isinstance(out.get(key), dict):
            out[key] = {
                k: expand(v, f"{where}.{json_path([key, k])}", environ) if isinstance(v, str) else v
                for k, v in out[key].items()
            }
    return out


def expand(value: str, where: str, environ: Mapping[str, str]) -> str:
    """Replace `${VAR}` and `${VAR:-default}` in `value` from `environ`, and `${META_AGENT_PYTHON}` by the Python
    that runs meta-agent.

    Raises:
        ConfigError: a variable is unset and has no default, or a `${` is malformed.
    """

    def substitute(match: re.Match[str]) -> str:
        name, default = match["name"], match["default"]
        if name == OWN_PYTHON:
            if not sys.executable:
                raise ConfigError(f"{where}: ${{{OWN_PYTHON}}}: this Python does not know its own path; write it out")
            return sys.executable
        if name in environ:
            return environ[name]
        if default is not None:
            return default
        raise ConfigError(f"{where}: environment variable {name} is not set (or write ${{{name}:-default}})")

    result = VARIABLE.sub(substitute, value)
    if "${" in VARIABLE.sub("", value):
        raise ConfigError(f"{where}: malformed variable reference in {value!r}: use ${{NAME}} or ${{NAME:-default}}")
    return result


def _known_keys(parent: Sequence[int | str]) -> list[str]:
    """The keys allowed at the object the location `parent` points to."""
    if not parent:
        return list(ServersFile.model_fields)
    if len(parent) == 2:
        return list((WebhookEntry if parent[0] == WEBHOOKS else ServerEntry).model_fields)
    if len(parent) == 3 and parent[2] == "tools":
        return list(ToolFilter.model_fields)
    return []
