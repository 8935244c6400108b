"""The errors meta-agent raises, under one root.

    MetaAgentError
    ├── ConfigError           bad servers.json, settings or command-line input (the CLI exits 2)
    ├── PatternError          a tool selection pattern that can never match a tool name
    └── ChildError            a call to a child server's tool could not be completed
        ├── ChildUnavailable  the child is starting, restarting or has failed; nothing was sent
        ├── ChildDied         the child's connection closed while the call was in flight
        ├── ChildTimeout      the call ran past the server's `timeout`; it was cancelled in the child
        └── ChildProtocolError the child answered with a JSON-RPC error or a malformed result

A `ChildError` is a tool failure: the loop turns it into an error result the model sees, and the run goes on.
"""

from __future__ import annotations


class MetaAgentError(Exception):
    """Root of every error meta-agent raises on purpose."""


class ConfigError(MetaAgentError):
    """Bad configuration or input; `str(error)` is one line naming the file or setting, the path and the problem."""


class PatternError(MetaAgentError):
    """A tool selection pattern that is malformed."""


class ChildError(MetaAgentError):
    """A child tool call failed; `str(error)` is one line fit for the model and the user."""

    def __init__(self, server: str, message: str) -> None:
        super().__init__(f"{server}: {message}")
        self.server = server


class ChildUnavailable(ChildError):
    """The child is not connected; the call was not sent."""


class ChildDied(ChildError):
    """The child's connection closed during the call; the child is being restarted."""


class ChildTimeout(ChildError):
    """The call took longer than the server's `timeout` and was cancelled."""


class ChildProtocolError(ChildError):
    """The child answered with a JSON-RPC error or a result that does not fit the protocol."""
