"""The test double: a script of responses, played in order, with every request recorded."""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Iterable

from meta_agent.core.messages import ModelRequest, ModelResponse
from meta_agent.errors import ScriptError

Step = ModelResponse | BaseException | Callable[[ModelRequest], Awaitable[ModelResponse]]


class ScriptedProvider:
    """Answers each call with the next step of its script: a response, an exception to raise, or an async function
    of the request. A call with the script used up is a `ScriptError`. Every request is kept in `requests`."""

    def __init__(self, script: Iterable[Step] = (), *, name: str = "scripted", accepts_images: bool = True) -> None:
        """A provider that plays `script`.

        Args:
            script: the steps, in the order the model calls get them; `add` appends more.
            name: the provider's name in events and errors.
            accepts_images: whether image parts may be sent to it.
        """
        self._script: deque[Step] = deque(script)
        self._name = name
        self._accepts_images = accepts_images
        self.requests: list[ModelRequest] = []

    @property
    def name(self) -> str:
        return self._name

    @property
    def accepts_images(self) -> bool:
        return self._accepts_images

    async def aclose(self) -> None:
        return None

    def add(self, *steps: Step) -> None:
        """Add `steps` at the end of the script."""
        self._script.extend(steps)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Record `request` and play the next step of the script.

        Args:
            request: what the loop sends the model.

        Returns:
            The step's response (or what its function returns).

        Raises:
            ScriptError: the script is used up.
            BaseException: the step itself, where it is an exception.
        """
        self.requests.append(request)
        if not self._script:
            raise ScriptError(f"{self._name}: unexpected model call #{len(self.requests)}: the script is used up")
        step = self._script.popleft()
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, ModelResponse):
            return step
        return await step(request)

    def assert_done(self) -> None:
        """Check that every step of the script was used (at the end of a test).

        Raises:
            ScriptError: steps of the script were never used.
        """
        if self._script:
            raise ScriptError(f"{self._name}: {len(self._script)} scripted responses were never used")
