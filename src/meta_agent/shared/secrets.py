"""Which environment variables hold secrets, told by their names, and how a secret is shown where the user must see
that it is there: the trace redacts such values (records/traces.py), and the command line never prints one whole
(cli/install.py)."""

from __future__ import annotations

import re

# Environment variables whose values are secrets wherever they turn up.
SECRET_NAME = re.compile(r"(?i)(api_?key|token|secret|password|passwd|credential|auth)")
# A secret shows this many of its first characters, which for a provider's key are its well-known prefix (`sk-a`),
# enough to tell which key it is, far too few to use it; a shorter one shows none.
_SHOWN = 4
_LONG_ENOUGH = 16


def is_secret_name(name: str) -> bool:
    """Whether the variable `name` holds a secret (`OPENAI_API_KEY`, `META_AGENT_HTTP_TOKEN`)."""
    return SECRET_NAME.search(name) is not None


def masked(secret: str) -> str:
    """`secret` as a user may be shown it: its first few characters and its length (`sk-a… (51 characters)`)."""
    head = secret[:_SHOWN] if len(secret) >= _LONG_ENOUGH else ""
    return f"{head}… ({len(secret)} characters)"
