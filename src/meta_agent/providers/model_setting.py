"""META_AGENT_MODEL: which model a run uses, and whether it can be used here, said without importing a vendor SDK
or reaching the network (but for the look at a local Ollama where no model is set), so that a command says what is
wrong before it starts anything. `make_provider` (providers/factory.py) refuses what these refuse, in the same words.

A setting is one `provider:model`, `sampling` (the host's own model), or a comma-separated fallback chain of them.
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx2

from meta_agent.errors import ModelNotConfigured

DEFAULT_OLLAMA_HOST = "http://127.0.0.1:11434"
# The variables the providers read besides META_AGENT_MODEL: each vendor's key and endpoint (providers/factory.py).
PROVIDER_VARIABLES = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "GEMINI_API_KEY",
    "OLLAMA_HOST",
)
# Current models the installed SDKs list and do not mark deprecated.
DEFAULT_MODELS = {"openai": "gpt-5.5", "anthropic": "claude-sonnet-5-5", "gemini": "gemini-2.5-flash"}
# An Ollama that does not answer this fast is not running.
OLLAMA_PROBE_TIMEOUT = 0.5

# `sampling` where no host lends its model (`meta-agent run`; a caller without sampling.tools, which the front says).
CANNOT_SAMPLE = "only a host can lend its model (through MCP sampling with tools)"
WHAT_TO_SET = (
    "set META_AGENT_MODEL (e.g. openai:gpt-5.5, anthropic:claude-sonnet-5-5, ollama:qwen3, gemini:gemini-2.5-flash)"
    " with its API key (OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY); without a key, a model server on this"
    " machine: OPENAI_BASE_URL=http://127.0.0.1:8080/v1 with META_AGENT_MODEL=openai:NAME, or Ollama at OLLAMA_HOST"
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
    model = await _ollama_model(ollama_url(environ))
    if model is not None:
        return f"ollama:{model}"
    raise ModelNotConfigured(f"no model is configured: {WHAT_TO_SET}")


def ollama_url(environ: Mapping[str, str]) -> str:
    """Where Ollama answers: OLLAMA_HOST (`host:port` as Ollama itself takes it, or a URL), else its default."""
    host = (environ.get("OLLAMA_HOST") or DEFAULT_OLLAMA_HOST).rstrip("/")
    return host if "://" in host else f"http://{host}"


async def _ollama_model(url: str) -> str | None:
    """The first model a running Ollama has, or None when none answers."""
    try:
        async with httpx2.AsyncClient(timeout=OLLAMA_PROBE_TIMEOUT) as http:
            response = await http.get(f"{url}/api/tags")
            response.raise_for_status()
            models = response.json().get("models") or []
    except (httpx2.HTTPError, ValueError, AttributeError):
        return None
    names = [m.get("name") for m in models if isinstance(m, dict) and m.get("name")]
    return names[0] if names else None
