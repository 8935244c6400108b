"""The model chain: which provider(s) a run uses, each made once and kept for the engine's life, with the fallback
chain META_AGENT_MODEL names (`openai:gpt-5.5,anthropic:claude-sonnet-4-5`): the run's model first, the rest after
it in order."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import anyio

from meta_agent.core.messages import ModelRequest, ModelResponse
from meta_agent.core.provider import Provider
from meta_agent.errors import ModelNotConfigured, ProviderAuthError
from meta_agent.providers.factory import make_provider, resolve_provider
from meta_agent.providers.model_setting import parse_chain


class ModelChain:
    def __init__(
        self,
        spec: str | None,
        environ: Mapping[str, str],
        *,
        timeout: float,
        openai_api: Literal["responses", "chat"] | None = None,
        aiohttp: bool = False,
        given: Provider | None = None,
    ) -> None:
        """`spec`: META_AGENT_MODEL (None or blank: the host's model, or the one `resolve_provider` finds). `environ`
        holds the providers' API keys and endpoints. `timeout`, `openai_api` and `aiohttp` are how each is made
        (`resolve_provider`). `given`, where set, is the model of every run instead (benchmarks, embedding)."""
        self.spec = (spec or "").strip()
        self.environ = environ
        self.timeout = timeout
        self.openai_api = openai_api
        self.aiohttp = aiohttp
        self._given = given
        self._providers: dict[str, Provider] = {}  # the models made, by their spec ("": the one found by looking)
        self._lock = anyio.Lock()

    @property
    def uses_hosts_model(self) -> bool:
        """Whether a run uses the caller's own model where the caller lends one: no model is set (nor given), or
        `sampling` is one of the chain's."""
        if self._given is not None:
            return False
        return not self.spec or "sampling" in (member.strip() for member in self.spec.split(","))

    async def models(self, sampling: Provider | None) -> tuple[Provider, ...]:
        """The run's model, then the rest of its fallback chain. The host's model where it is asked for (`sampling`
        in META_AGENT_MODEL) or nothing else is set; the others made once and kept (a sampling provider belongs to
        one call and is never kept). In a chain, a model that cannot be made here is `Unusable`: the chain passes it.

        Raises:
            ModelNotConfigured: no usable model, or a malformed META_AGENT_MODEL, saying what to set.
        """
        if self._given is not None:
            return (self._given,)
        if not self.spec:
            return (sampling if sampling is not None else await self._made(""),)
        chain = parse_chain(self.spec)
        models: list[Provider] = []
        for member in chain:
            try:
                models.append(await self._made(member, sampling))
            except ModelNotConfigured as exc:
                if len(chain) == 1:
                    raise
                models.append(Unusable(member, str(exc)))
        return tuple(models)

    async def aclose(self) -> None:
        """Close the models made (the given one and the hosts' are their owners' to close)."""
        for provider in self._providers.values():
            await provider.aclose()

    async def _made(self, spec: str, sampling: Provider | None = None) -> Provider:
        """The provider `spec` names ("": the one `resolve_provider` finds), made once and kept; `sampling` is the
        caller's own.

        Raises:
            ModelNotConfigured: it cannot be made here.
        """
        if spec == "sampling":
            return make_provider("sampling", self.environ, sampling=sampling)
        async with self._lock:  # two first calls at once must not make (and leak) two clients
            if spec not in self._providers:
                self._providers[spec] = await resolve_provider(
                    spec or None, self.environ, timeout=self.timeout, openai_api=self.openai_api, aiohttp=self.aiohttp
                )
        return self._providers[spec]


class Unusable:
    """A model of a fallback chain that cannot be made here (its API key is not set, the caller cannot sample):
    each call fails as a refused key does, so the chain goes on with the next model and the progress says why."""

    def __init__(self, name: str, problem: str) -> None:
        self._name = name
        self._problem = problem

    @property
    def name(self) -> str:
        return self._name

    @property
    def accepts_images(self) -> bool:
        return False

    async def aclose(self) -> None:
        return None

    async def complete(self, request: ModelRequest) -> ModelResponse:
        raise ProviderAuthError(self._problem, brief="not configured")
