"""The one thing the loop asks of a model: the `Provider` protocol. Its implementations, one per wire format, are in
meta_agent.providers; the loop sees only this."""

from __future__ import annotations

from typing import Protocol

from meta_agent.core.messages import ModelRequest, ModelResponse


class Provider(Protocol):
    """One model behind one wire format."""

    @property
    def name(self) -> str:
        """`provider:model`, for events and errors."""
        ...

    @property
    def accepts_images(self) -> bool:
        """Whether image parts may be sent to the model."""
        ...

    async def aclose(self) -> None:
        """Release the provider's HTTP client."""
        ...

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """One model call.

        Args:
            request: the transcript so far, the tool schemas, and the limits of the answer.

        Returns:
            The model's answer: text, tool calls, thinking and usage, in the package's own types.

        Raises:
            ProviderError: a subclass naming what failed; transient failures were already retried by the SDK.
        """
        ...


class WrappedProvider:
    """A model around the run's own, for what it adds to each call (a durable step, a span made current): the
    wrapped model's name and abilities. The engine owns the wrapped model and closes it, so closing this does
    nothing. A subclass defines `complete`."""

    def __init__(self, inner: Provider) -> None:
        self.inner = inner

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def accepts_images(self) -> bool:
        return self.inner.accepts_images

    async def aclose(self) -> None:
        return None
