"""The errors meta-agent raises, under one root.

    MetaAgentError
    ├── ConfigError           bad servers.json, settings or command-line input (the CLI exits 2)
    ├── PatternError          a tool selection pattern that can never match a tool name
    ├── LimitExceeded         a run reached one of its limits; `reason` names it (the loop's last turn follows)
    ├── ProviderError         the model provider failed; this ends the run, or passes the turn to the next model
    │                         of a fallback chain (`falls_back`: auth, rate limit, unavailable)
    │   ├── ModelNotConfigured no model is configured, or the configured one cannot be used here
    │   ├── ProviderAuthError  the provider refused the credentials
    │   ├── ProviderRateLimited the provider's rate limit, after the SDK's own retries
    │   ├── ProviderUnavailable cannot connect, timed out, or the provider is overloaded or failing (5xx)
    │   ├── ProviderBadRequest the provider refused the request as malformed or too large
    │   └── ScriptError        the scripted test provider got a call its script did not expect
    ├── ImageGenError         image_gen cannot run: a bad argument, no image backend, or an unusable answer
    ├── ConversationLost      a turn's hold on its conversation lapsed and another process took it; not saved
    └── ChildError            a call to a child server's tool could not be completed
        ├── ChildUnavailable  the child is starting, restarting or has failed; nothing was sent
        ├── ChildDied         the child's connection closed while the call was in flight
        ├── ChildTimeout      the call ran past the server's `timeout`; it was cancelled in the child
        └── ChildProtocolError the child answered with a JSON-RPC error or a malformed result

A `ChildError` or `ImageGenError` is a tool failure: the loop turns it into an error result the model sees, and
the run goes on (so is a `ProviderError` from image_gen's backend). Limits, cancellation and `ProviderError`s of
the run's model end a run.
"""

from __future__ import annotations

from typing import Literal

from meta_agent.shared.text import first_line

# The limit a `LimitExceeded` names: each is also the stop reason of the run it ends (core.result.StopReason).
LimitReason = Literal["max_steps", "token_budget", "deadline"]


class MetaAgentError(Exception):
    """Root of every error meta-agent raises on purpose."""

    def __reduce__(self) -> tuple[object, ...]:
        # Pickled whatever its constructor takes (a durable run's checkpoint holds the errors of its steps): its
        # message and its attributes, not its constructor's arguments.
        return (_rebuilt, (type(self), str(self), self.__dict__))


class RunCancelled(Exception):
    """A durable run resumed after its replica stopped was stopped by its task's caller (or its task's question went
    unanswered): durable/runs.py marks it cancelled for good. Not a MetaAgentError: nobody is told it but the run's
    record."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id} was cancelled")
        self.run_id = run_id


def _rebuilt(kind: type[MetaAgentError], message: str, attributes: dict[str, object]) -> MetaAgentError:
    error = kind.__new__(kind)
    Exception.__init__(error, message)
    error.__dict__.update(attributes)
    return error


class ConfigError(MetaAgentError):
    """Bad configuration or input; `str(error)` is one line naming the file or setting, the path and the problem."""


class PatternError(MetaAgentError):
    """A tool selection pattern that is malformed."""


class LimitExceeded(MetaAgentError):
    """A run limit was reached; `reason` is the stop reason that names it."""

    def __init__(self, reason: LimitReason, message: str) -> None:
        super().__init__(message)
        self.reason: LimitReason = reason


class ProviderError(MetaAgentError):
    """The model provider failed; `str(error)` is one line naming the provider and what to do; `brief` says what
    failed in a few words ("HTTP 503"), for a progress line."""

    # Whether the next model of a fallback chain takes the turn: the provider, not the request, failed.
    falls_back = False

    def __init__(self, message: str, *, brief: str | None = None) -> None:
        super().__init__(message)
        self.brief = brief or message


class ModelNotConfigured(ProviderError):
    """No usable model: `str(error)` says exactly what to set."""


class ProviderAuthError(ProviderError):
    """The provider refused the API key, or has none."""

    falls_back = True


class ProviderRateLimited(ProviderError):
    """Rate limited, after the SDK's retries."""

    falls_back = True


class ProviderUnavailable(ProviderError):
    """Connection failure, timeout, overload or a server error, after the SDK's retries."""

    falls_back = True


class ProviderBadRequest(ProviderError):
    """The provider refused the request itself (bad model name, context too long, malformed tools)."""


class ScriptError(ProviderError):
    """The scripted provider was called when its script did not expect it."""


class ConversationLost(MetaAgentError):
    """A turn could not save its conversation: its hold had lapsed and another process took the conversation over."""


class ImageGenError(MetaAgentError):
    """image_gen cannot run as asked; `str(error)` is one line naming the argument or the setting to change."""


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


def summary(exc: BaseException) -> str:
    """An unexpected exception in one line: its type and the first line of its message (of its `leaf`, where a task
    group wrapped it). What a user is told of a bug of ours; the traceback goes to the log."""
    exc = leaf(exc)
    gist = first_line(str(exc))
    return f"{type(exc).__name__}: {gist}" if gist else type(exc).__name__


def leaf(exc: BaseException) -> BaseException:
    """The exception inside (possibly nested) exception groups, as task groups raise them: the first error, or the
    first of what is there when there is no error (only cancellations): a cancellation beside an error is the
    effect of that error, which is what a message must name."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = next((inner for inner in exc.exceptions if isinstance(inner, Exception)), exc.exceptions[0])
    return exc
