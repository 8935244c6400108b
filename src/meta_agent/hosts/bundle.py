"""`meta-agent bundle`: an MCP bundle (`.mcpb`, a zip file with a `manifest.json`) that Claude Desktop installs with one
click and whose settings (the model and each provider's key, the keys marked sensitive: kept in the system's
keychain, shown masked) it asks for at installation.

The bundle holds the manifest, the servers.json in use (and its trust file, if there is one) and a small server file
(bundle_main.py) that the manifest has a Python run: this installation's Python (`--python` names another, which must
have meta-agent installed). meta-agent's own packages are not in the bundle: its dependencies include compiled ones
(pydantic, cryptography) that a bundle cannot carry for every platform and Python, so the bundle starts the
installation it names, on this kind of machine (`compatibility.platforms`).

The zip is the same for the same inputs (fixed times and permissions), and written as a whole or not at all.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import zipfile
from importlib import resources
from pathlib import Path
from typing import Any

from meta_agent.providers.model_setting import DEFAULT_MODELS, PROVIDER_VARIABLES
from meta_agent.store.trustfile import trust_path
from meta_agent.version import __version__

DEFAULT_OUTPUT = Path("meta-agent.mcpb")
# The manifest version Claude Desktop and the `mcpb` tool document as current.
MANIFEST_VERSION = "0.3"
SERVER_FILE = "server/main.py"
# The providers whose key the bundle asks for, as (name in META_AGENT_MODEL, as people write it).
KEYED_PROVIDERS = (("anthropic", "Anthropic"), ("openai", "OpenAI"), ("gemini", "Gemini"))
# Every file of the zip gets this time and these permissions, so that the same inputs make the same bytes.
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_FILE_MODE = 0o100644


def build(config: Path, output: Path, *, python: str | None = None) -> list[str]:
    """Write the bundle serving `config` to `output`; returns the names of the files in it.

    Raises:
        OSError: `config` cannot be read, or `output` cannot be written.
    """
    files = {
        "manifest.json": (json.dumps(manifest(python or os.path.abspath(sys.executable)), indent=2) + "\n").encode(),
        "servers.json": config.read_bytes(),
        SERVER_FILE: resources.files("meta_agent.hosts").joinpath("bundle_main.py").read_bytes(),
    }
    trust = trust_path(config)
    if trust.is_file():
        files["servers.trust.json"] = trust.read_bytes()
    _write_zip(output, files)
    return list(files)


def manifest(python: str) -> dict[str, Any]:
    """The bundle's manifest: its server started by `python`, with the user's settings in its environment."""
    env = {"META_AGENT_MODEL": "${user_config.model}"}
    for provider, _ in KEYED_PROVIDERS:
        variable = f"{provider.upper()}_API_KEY"
        assert variable in PROVIDER_VARIABLES
        env[variable] = f"${{user_config.{provider}_api_key}}"
    return {
        "manifest_version": MANIFEST_VERSION,
        "name": "meta-agent",
        "display_name": "meta-agent",
        "version": __version__,
        "description": "An MCP server that is itself an agent: a bounded tool loop over the MCP servers of its"
        " servers.json.",
        "author": {"name": "the meta-agent authors"},
        "license": "MIT",
        "keywords": ["agent", "mcp", "tools"],
        "server": {
            "type": "python",
            "entry_point": SERVER_FILE,
            "mcp_config": {
                "command": python,
                "args": [f"${{__dirname}}/{SERVER_FILE}", "serve", "--config", "${__dirname}/servers.json"],
                "env": env,
            },
        },
        "tools_generated": True,
        "user_config": user_config(),
        "compatibility": {"platforms": [_platform()], "runtimes": {"python": ">=3.11"}},
    }


def user_config() -> dict[str, Any]:
    """What Claude Desktop asks at installation: the model (required, with a default) and each provider's key
    (sensitive, optional: empty is unset, so the model's own key is the one that counts)."""
    fields: dict[str, Any] = {
        "model": {
            "type": "string",
            "title": "Model",
            "description": "META_AGENT_MODEL: provider:model (anthropic:, openai:, gemini:, ollama:), or a"
            " comma-separated fallback chain; the provider's key below",
            "required": True,
            "default": f"anthropic:{DEFAULT_MODELS['anthropic']}",
        }
    }
    for provider, title in KEYED_PROVIDERS:
        fields[f"{provider}_api_key"] = {
            "type": "string",
            "title": f"{title} API key",
            "description": f"{provider.upper()}_API_KEY, for {provider}: models",
            "sensitive": True,
            "required": False,
            "default": "",
        }
    return fields


def _platform() -> str:
    return "win32" if sys.platform == "win32" else "darwin" if sys.platform == "darwin" else "linux"


def _write_zip(output: Path, files: dict[str, bytes]) -> None:
    output = Path(os.path.abspath(output))
    handle, staged = tempfile.mkstemp(dir=output.parent, prefix=f".{output.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as raw, zipfile.ZipFile(raw, "w") as archive:
            for name, data in files.items():
                info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = _FILE_MODE << 16
                archive.writestr(info, data)
        os.chmod(staged, 0o644)
        os.replace(staged, output)
    except BaseException:
        Path(staged).unlink(missing_ok=True)
        raise
