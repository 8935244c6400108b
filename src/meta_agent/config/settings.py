"""The `META_AGENT_*` settings: one pydantic-settings model read from the environment (README, Settings).

A bad value is a `ConfigError` naming its variable, in one line.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from meta_agent.core.limits import DEFAULT_MAX_STEPS, DEFAULT_MAX_TOOL_CALLS, DEFAULT_TOKEN_BUDGET
from meta_agent.errors import ConfigError
from meta_agent.shared.addresses import Network, parse_networks
from meta_agent.shared.validation import did_you_mean, problem

DEFAULT_CONFIG = Path("servers.json")


class Settings(BaseSettings):
    """`META_AGENT_*` settings (README, Settings)."""

    model_config = SettingsConfigDict(env_prefix="META_AGENT_", extra="ignore")

    config: Path = Field(
        default=DEFAULT_CONFIG,
        description="The servers.json a command reads when it is given no `--config` (default: `servers.json` in the"
        " working directory).",
    )
    model: str | None = Field(
        default=None,
        description="The model of `ask`, `plan` and `agent`, as `provider:model` (`openai:gpt-5.5`,"
        " `anthropic:claude-sonnet-5-5`, `ollama:qwen3`, `gemini:gemini-2.5-flash`), `sampling` (the host's own model),"
        " or a comma-separated fallback chain (`openai:gpt-5.5,ollama:qwen3`). Unset: the host's model through MCP"
        " sampling where the host offers it, else the default model of the provider whose key is set, else a running"
        " Ollama.",
    )
    # None: image_gen's default model (image_gen.DEFAULT_IMAGE_MODEL), offered against OpenAI itself only.
    image_model: str | None = Field(
        default=None,
        description="The model of `image_gen`, `openai:MODEL`, sent to the images endpoint of `OPENAI_BASE_URL`."
        " Unset: `openai:gpt-image-2.5-flare`, at OpenAI itself only.",
    )
    max_steps: int = Field(
        default=DEFAULT_MAX_STEPS,
        ge=1,
        description="The steps of an `agent` call that asks for no other number.",
    )
    max_steps_ceiling: int = Field(
        default=50, ge=1, description="The most steps a call may ask for (`max_steps` of `plan` and `agent`)."
    )
    max_tool_calls: int = Field(
        default=DEFAULT_MAX_TOOL_CALLS,
        ge=1,
        description="The tool calls a run may make in all, those of its programs in code mode included; a call past it"
        " is refused, and a program that makes it is stopped.",
    )
    token_budget: int = Field(
        default=DEFAULT_TOKEN_BUDGET,
        ge=1,
        description="The tokens a run may spend when its caller asks for no other budget.",
    )
    time_limit: float | None = Field(
        default=1800.0,
        gt=0,
        description="Seconds of wall clock per run before its last turn; time spent waiting for a user's answer"
        " counts.",
    )
    model_timeout: float = Field(
        default=300.0,
        gt=0,
        description="Seconds one model request may take, per attempt; the SDKs retry twice, so it also bounds a run's"
        " last turn.",
    )
    trace_dir: Path | None = Field(
        default=None,
        description="Where each run's trace is written (`<run_id>.jsonl`). Unset: `$XDG_STATE_HOME/meta-agent/traces`,"
        " else `~/.local/state/meta-agent/traces`.",
    )
    trace_max_age_days: float = Field(
        default=14.0,
        gt=0,
        description="Traces older than this many days are pruned at start, except live ones; so are, by `serve`, what"
        " the views and the results of runs that ended that long ago keep in the database (their events, their"
        " images).",
    )
    conversations_db: Path | None = Field(
        default=None,
        description="The embedded SQLite file of the state: conversations and the run index. Unset:"
        " `$XDG_DATA_HOME/meta-agent/conversations.sqlite3`, else under `~/.local/share`.",
    )
    database_url: str | None = Field(
        default=None,
        description="A PostgreSQL database (`postgresql://user:password@host:port/database`) for the state replicas"
        " share: conversations, the run index, parked runs, durable runs. Unset (or empty): the embedded SQLite file of"
        " `META_AGENT_CONVERSATIONS_DB`.",
    )
    lease_seconds: float = Field(
        default=30.0,
        gt=0,
        le=300,
        description="How long a dead process's hold on a conversation and mark on a running run outlive it: how soon"
        " its conversations are free again and its runs `interrupted` (on PostgreSQL, resumed by another replica).",
    )
    stall_seconds: float = Field(
        default=30.0,
        gt=0,
        description="How long the event loop of `serve` may go without turning before the process leaves with exit"
        " status 70, for its supervisor to start it again: work that never yields cannot freeze a replica for good.",
    )
    max_resumes: int = Field(
        default=3,
        ge=0,
        description="How often a durable run is handed on after its replica stopped before it is given up: a run that"
        " takes its replica down with it would otherwise take down every replica in turn.",
    )
    http_token: str | None = Field(
        default=None,
        description="With `serve --transport http`: `/mcp` needs `Authorization: Bearer <token>` (else 401), and"
        " `/health` shows the version and each child's status only to a request that gives it.",
    )
    auth_issuer: str | None = Field(
        default=None,
        description="With `serve --transport http`: the issuer URL of the OAuth authorization server whose access"
        " tokens `/mcp` takes (`https://keycloak.example.com/realms/tools`), exactly as its tokens' `iss` claim writes"
        " it; https, or http to this machine only. `/mcp` then needs a bearer JWT signed by a key of the issuer's JWKS,"
        " for `META_AGENT_AUTH_AUDIENCE`, unexpired, with `META_AGENT_AUTH_SCOPES`; the protected resource metadata is"
        " served at `/.well-known/oauth-protected-resource`. Not together with `META_AGENT_HTTP_TOKEN`.",
    )
    auth_audience: str | None = Field(
        default=None,
        description="The `aud` the access tokens must name: this server's resource URL as its callers reach it"
        " (`https://mcp.example.com/mcp`). Unset: `http://HOST:PORT/mcp` of `--host` and `--port`.",
    )
    auth_jwks_url: str | None = Field(
        default=None,
        description="Where the issuer's signing keys (JWKS) are. Unset: the `jwks_uri` of the issuer's metadata (RFC"
        " 8414 `/.well-known/oauth-authorization-server`, else OpenID `/.well-known/openid-configuration`).",
    )
    auth_scopes: str | None = Field(
        default=None,
        description="Scopes every access token must carry (space- or comma-separated; `scope` or `scp` claim); a token"
        " without one is answered 403 `insufficient_scope`. Unset: none.",
    )
    ui_client_id: str | None = Field(
        default=None,
        description="With `META_AGENT_AUTH_ISSUER`: the client id of a public OAuth client (authorization code with"
        " PKCE) registered at the issuer with the redirect URI `<this server's URL>/ui/callback`, as which the web"
        " console at `/ui` signs its users in. Unset: `/ui/sign-in` says to set it, and the console takes only the"
        " `Authorization` header `/mcp` takes.",
    )
    max_parked: int = Field(
        default=1000,
        ge=1,
        description="Runs of 2026-07-28 callers that may wait for an answer at once, per process (each replica counts"
        " its own); the next call that would park is refused in one line.",
    )
    task_ttl: float = Field(
        default=3600.0,
        gt=0,
        description="Seconds an MCP task and its result are kept at most, from its creation and from its run's end"
        " (a running task is kept until it ends); a caller's `ttl` is honoured within this, and a minute at least.",
    )
    max_tasks: int = Field(
        default=100,
        ge=1,
        description="MCP tasks that may run at once per process (each replica counts its own: N replicas run up to N"
        " times as many); a call that would start one more is refused in one line, however many calls come at once."
        " Runs started from the views' task box have as many places of their own, 10 for one subject.",
    )
    internal_tools: str | None = Field(
        default=None,
        description="The internal tools offered, comma-separated (`image_gen`, `describe_image`, `read_result`)."
        " Unset: every one; empty: none.",
    )
    openai_api: Literal["responses", "chat"] | None = Field(
        default=None,
        description="The wire format `openai:` speaks. Unset: the Responses API against OpenAI itself, Chat Completions"
        " at any other `OPENAI_BASE_URL`. The `ollama:` and `gemini:` presets speak Chat Completions.",
    )
    vision_model: str | None = Field(
        default=None,
        description="The model `describe_image` asks, `provider:model` (one model, not a chain). Unset: the run's own"
        " model, where it takes images; one that names no model (`gpt-5.5`, `sampling`) withholds `describe_image`,"
        " saying why.",
    )
    fetch_allow_networks: str | None = Field(
        default=None,
        description="Comma-separated CIDRs (`127.0.0.1/32,10.0.0.0/8`) that `describe_image` and `image_gen` may fetch"
        " from besides global addresses. Unset: none, so loopback, private, link-local and other inward addresses are"
        " refused. A bad CIDR is an error at start.",
    )
    tool_search: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="Whether a run finds its tools with `find_tools` instead of seeing every schema: `auto` when a run"
        " has more than 30 selected tools, `on` always (except `ask`), `off` never.",
    )
    code_mode: Literal["auto", "on", "off"] = Field(
        default="off",
        description="Code mode: the model writes a short program over the run's tools with `run_code`, and only what"
        " it prints comes back to the model. `on`: `run_code` alone (with `find_tools` when tool search is on); `auto`:"
        " `run_code` alone when a run has more than 30 selected tools, else beside them, for the model to choose;"
        " `off`: no `run_code`. A call's `code` argument of `agent` or `plan` overrides it (`true` is `on`).",
    )
    code_time_limit: float = Field(
        default=30.0,
        gt=0,
        le=600,
        description="Seconds a program of code mode may run (its own work, not the tool calls it waits for): one past"
        " it is stopped, and the model gets a one-line error.",
    )
    result_inline_chars: int = Field(
        default=20_000,
        ge=1_000,
        description="A tool result longer than this many characters is kept whole for the run: the model gets its head"
        " and a handle, and reads on with `read_result`. 20,000 (about 5,000 tokens) bounds what one result adds to"
        " every later request, and holds most real results whole.",
    )
    log_level: Literal["debug", "info", "warning", "error"] | None = Field(
        default=None,
        description="The level of the log lines on stderr when `--log-level` is not given. Unset: `info` for `serve`,"
        " `warning` for the other commands.",
    )

    @field_validator("fetch_allow_networks")
    @classmethod
    def _networks(cls, value: str | None) -> str | None:
        parse_networks(value)  # raises ValueError naming the entry that is not a network
        return value

    def fetch_networks(self) -> tuple[Network, ...]:
        """The networks META_AGENT_FETCH_ALLOW_NETWORKS allows fetches to reach (checked when the settings load)."""
        return parse_networks(self.fetch_allow_networks)

    @field_validator("database_url")
    @classmethod
    def _postgres_only(cls, value: str | None) -> str | None:
        if not value:
            return None  # set but empty: the embedded default, as when unset
        if not value.startswith(("postgresql://", "postgres://")):
            raise ValueError(
                "expected a PostgreSQL URL (postgresql://user:password@host:port/database);"
                " unset it for the embedded store"
            )
        return value

    def enabled_internal_tools(self, known: list[str]) -> list[str]:
        """The internal tools `META_AGENT_INTERNAL_TOOLS` enables, in `known` order.

        Raises:
            ConfigError: a name that is not an internal tool.
        """
        if self.internal_tools is None:
            return list(known)
        wanted = [name.strip() for name in self.internal_tools.split(",") if name.strip()]
        for name in wanted:
            if name not in known:
                hint = did_you_mean(name, known, "internal tools") or " (there are none)"
                raise ConfigError(f"META_AGENT_INTERNAL_TOOLS: unknown internal tool {name!r}{hint}")
        return [name for name in known if name in wanted]


def load_settings() -> Settings:
    """Read the `META_AGENT_*` environment.

    Returns:
        The settings, each at its default where its variable is unset.

    Raises:
        ConfigError: a setting with a bad value, named by its variable.
    """
    try:
        return Settings()
    except ValidationError as exc:
        error = exc.errors()[0]
        raise ConfigError(f"META_AGENT_{str(error['loc'][0]).upper()}: {problem(error)}") from None


def unknown_settings(environ: Mapping[str, str]) -> list[str]:
    """A line for each `META_AGENT_*` variable that names no setting: a misspelt one is otherwise ignored without a
    word, and the run goes on with the default."""
    known = sorted(name.upper() for name in Settings.model_fields)
    lines = []
    for name in sorted(environ):
        setting = name.removeprefix("META_AGENT_")
        if setting != name and setting not in known:
            close = difflib.get_close_matches(setting, known, n=1)  # without the prefix, which every name shares
            hint = f" (did you mean META_AGENT_{close[0]}?)" if close else ""
            lines.append(f"{name} is no setting and is ignored{hint}")
    return lines
