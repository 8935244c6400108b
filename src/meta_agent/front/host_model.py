"""The host's own model, lent through MCP sampling (README, Models): used where `sampling` is in META_AGENT_MODEL, or
where no model is set, by a caller that declares sampling with tools (the `sampling.tools` capability), in either
protocol era. On a 2025-11-25 session each model turn is a `sampling/createMessage` request on the session's
back-channel (`live_model`); 2026-07-28 has none, so there each model turn is one more round of the call, an input
request the host answers by calling again (`asked_model`, over the rounds of meta_agent.front.approvals.parked).

A caller that lends no model, where the run would have used it, is told what it lacks (`explained`).
"""

from __future__ import annotations

import warnings
from collections.abc import Awaitable, Callable

import mcp.types as t
from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPDeprecationWarning

from meta_agent.core.provider import Provider
from meta_agent.providers.chain import ModelChain
from meta_agent.providers.sampling import SamplingProvider

# The `input_requests` key of a model turn put to a 2026-07-28 caller (approvals and a child's questions have theirs).
MODEL_KEY = "sampling"

# Puts a request to the caller as the next round of its call, under a key, and waits for the answer
# (meta_agent.front.approvals.parked.ParkedRun.ask).
Ask = Callable[[str, t.CreateMessageRequest], Awaitable[t.InputResponse | None]]


def declares_sampling(ctx: Context) -> bool:
    """Whether the caller declared MCP sampling (a child's sampling can then be passed on to it)."""
    caps = ctx.client_capabilities
    return caps is not None and caps.sampling is not None


def lends_model(ctx: Context) -> bool:
    """Whether the caller can run meta-agent's model turns: it declared sampling with tools."""
    caps = ctx.client_capabilities
    return caps is not None and caps.sampling is not None and caps.sampling.tools is not None


def live_model(ctx: Context) -> Provider:
    """The caller's model on a 2025-11-25 session: each turn a sampling request related to the caller's call."""

    async def send(params: t.CreateMessageRequestParams) -> t.InputResponse | None:
        # sampling is deprecated in 2026-07-28 (SEP-2577) and the SDK warns on every call; used on purpose here
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            answer: t.CreateMessageResultWithTools = await ctx.session.create_message(
                params.messages,
                max_tokens=params.max_tokens,
                system_prompt=params.system_prompt,
                tools=params.tools or [],
                tool_choice=params.tool_choice,
                related_request_id=ctx.request_context.request_id,
            )
        return answer

    return SamplingProvider(send)


def asked_model(ask: Ask) -> Provider:
    """The caller's model on 2026-07-28: each turn one more round of the call, its request under `MODEL_KEY`."""

    async def send(params: t.CreateMessageRequestParams) -> t.InputResponse | None:
        return await ask(MODEL_KEY, t.CreateMessageRequest(params=params))

    return SamplingProvider(send)


def explained(message: str, ctx: Context, models: ModelChain) -> str:
    """`message` (why no model could be used), with what this caller lacks to lend its own where the run would have
    used it (no model set, or `sampling` in META_AGENT_MODEL)."""
    if not models.uses_hosts_model or lends_model(ctx):
        return message
    caps = ctx.client_capabilities
    if caps is None or caps.sampling is None:
        lacks = "declares no MCP sampling"
    else:
        lacks = "declares MCP sampling but not its tools (the sampling.tools capability)"
    return (
        f"{message}; or let the host lend its own model: this host {lacks}, and meta-agent needs sampling with tools"
        " (either protocol era)"
    )
