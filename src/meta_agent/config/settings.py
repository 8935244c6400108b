"""The `META_AGENT_*` settings: one pydantic-settings model read from the environment (README, Settings).

A bad value is a `ConfigError` naming its variable, in one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from meta_agent.core.limits import DEFAULT_MAX_STEPS, DEFAULT_TOKEN_BUDGET
from meta_agent.errors import ConfigError
from meta_agent.shared.addresses import Network, parse_networks
from meta_agent.shared.validation import did_you_mean, problem

DEFAULT_CONFIG = Path("servers.json")


class Settings(BaseSettings):
    """`META_AGENT_*` settings (README, Settings)."""

    model_config = SettingsConfigDict(env_prefix="META_AGENT_", extra="ignore")

    config: Path = DEFAULT_CONFIG
    model: str | None = None
    # None: image_gen's default model (image_gen.DEFAULT_IMAGE_MODEL), offered against OpenAI itself only.
    image_model: str | None = None
    max_steps: int = Field(default=DEFAULT_MAX_STEPS, ge=1)
    max_steps_ceiling: int = Field(default=50, ge=1)
    token_budget: int = Field(default=DEFAULT_TOKEN_BUDGET, ge=1)
    # Wall-clock seconds a run may take before its last turn (the time a user takes to answer a question counts).
    time_limit: float | None = Field(default=1800.0, gt=0)
    # Seconds one model request may take, per attempt (the SDKs retry twice): also what bounds a run's last turn.
    model_timeout: float = Field(default=300.0, gt=0)
    trace_dir: Path | None = None  # None: the user state dir (see records.traces.default_trace_dir)
    trace_max_age_days: float = Field(default=14.0, gt=0)
    conversations_db: Path | None = None  # None: the user data dir (see store.conversations.default_path)
    # PostgreSQL shared by replicas (postgresql://…); None: the embedded SQLite file of conversations_db.
    database_url: str | None = None
    # Seconds a process's hold on a conversation, and its mark on a running run, outlive its last renewal: how soon
    # a process that died is known to have (its conversations free again, its runs `interrupted`).
    lease_seconds: float = Field(default=30.0, gt=0, le=300)
    # Seconds the event loop of `serve` may go without turning before the process leaves with exit status 70
    # (cli/watchdog.py): work that never yields, whatever it is, cannot freeze a replica for good.
    stall_seconds: float = Field(default=30.0, gt=0)
    # How often a durable run is handed on after its replica stopped before it is given up (durable/runs.py): a
    # run that takes its replica down with it would otherwise take down every replica in turn.
    max_resumes: int = Field(default=3, ge=0)
    http_token: str | None = None
    # Runs of 2026-07-28 callers waiting at once for an answer (front/parked.py), per process: a flood of calls that
    # park and never come back costs a bounded amount of memory, and the next call that would park is refused.
    max_parked: int = Field(default=1000, ge=1)
    # Comma-separated names; None (unset) enables every internal tool, "" enables none.
    internal_tools: str | None = None
    # Which OpenAI wire format openai: speaks; None: the Responses API against OpenAI itself, Chat Completions at any
    # other OPENAI_BASE_URL (providers.make_provider). The ollama: and gemini: presets speak Chat Completions.
    openai_api: Literal["responses", "chat"] | None = None
    # The model describe_image asks (`provider:model`); None: the run's model, when it accepts images.
    vision_model: str | None = None
    # Comma-separated CIDRs (127.0.0.1/32,10.0.0.0/8) describe_image and image_gen may fetch from besides global
    # addresses; None: none (loopback, private, link-local and the like are refused: shared/addresses.py).
    fetch_allow_networks: str | None = None
    # Whether a run finds its tools with find_tools instead of seeing every schema; auto: above
    # core.tool_search.AUTO_THRESHOLD selected tools (never in ask mode).
    tool_search: Literal["auto", "on", "off"] = "auto"
    # A tool result with more characters than this is kept whole for the run: the model gets its head and a handle,
    # and reads on with read_result. 20,000 (about 5,000 tokens) bounds what one result adds to every later request,
    # and holds most real results whole (a fetched page, a source file), which then cost no read_result round trip.
    result_inline_chars: int = Field(default=20_000, ge=1_000)
    log_level: Literal["debug", "info", "warning", "error"] | None = None

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

    Raises:
        ConfigError: a setting with a bad value, named by its variable.
    """
    try:
        return Settings()
    except ValidationError as exc:
        error = exc.errors()[0]
        raise ConfigError(f"META_AGENT_{str(error['loc'][0]).upper()}: {problem(error)}") from None
