"""A run's images across replicas: two `meta-agent serve --transport http` on one PostgreSQL database, image_gen through
the real openai SDK to a fake images endpoint on 127.0.0.1. A run made on one replica, read through the other (the
resource meta-agent://runs/{run_id} with the SDK's real Client; a 2025-11-25 task's `tasks/result` and a 2026-07-28
task's `tasks/get` in raw JSON-RPC, as tests/task_hosts.py speaks them), carries the images the call
on the first returned: the same base64, media types and order, in the same content. Another subject reads none of
it."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx2
import mcp.types as t
import pytest
from fake_llm import FakeLLM, images_reply, openai_reply
from fault_server import TINY_PNG
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from replicas import replica, replica_environ
from task_hosts import LEGACY, MODERN, TERMINAL, caller

pytestmark = pytest.mark.anyio

IMAGE_MODEL = "openai:gpt-image-2.5-flare"  # the fake endpoint is local: image_gen needs its model set
RED, BLUE = (base64.b64encode(TINY_PNG + colour).decode() for colour in (b"red", b"blue"))


def drawing(llm: FakeLLM) -> None:
    """One `agent` run's model and images endpoint: image_gen called for two images, then the answer."""
    llm.reply(openai_reply(None, ("c1", "image_gen", {"prompt": "a red dot and a blue dot", "n": 2})))
    llm.reply(images_reply(RED, BLUE))
    llm.reply(openai_reply("Two dots."))


def dumped(result: t.CallToolResult) -> list[dict[str, Any]]:
    """A result's content as it goes on the wire."""
    return [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content]


async def test_a_results_images_read_through_the_other_replica_are_the_ones_its_call_returned(
    database_url: str, llm: FakeLLM, tmp_path: Path
) -> None:
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {}}))
    environ = {**replica_environ(llm, database_url, tmp_path), "META_AGENT_IMAGE_MODEL": IMAGE_MODEL}
    with replica(config, environ) as (_, one, _), replica(config, environ) as (_, other, _):
        drawing(llm)
        async with Client(one) as first:
            live = await first.call_tool("agent", {"task": "Draw a red dot and a blue dot."})
        assert not live.is_error, live
        images = [(block.data, block.mime_type) for block in live.content if isinstance(block, t.ImageContent)]
        assert images == [(RED, "image/png"), (BLUE, "image/png")]
        run_id = str(live.structured_content["run_id"])  # type: ignore[index]

        async with Client(other) as second:
            state, *blobs = (await second.read_resource(f"meta-agent://runs/{run_id}")).contents
        assert isinstance(state, t.TextResourceContents)
        assert json.loads(state.text)["result"] == live.structured_content
        assert [(blob.blob, blob.mime_type) for blob in blobs if isinstance(blob, t.BlobResourceContents)] == images
        assert len(blobs) == len(images)

        drawing(llm)
        async with caller(one, LEGACY) as maker:
            task_id = await maker.start("agent", "Draw a red dot and a blue dot.")
        async with caller(other, LEGACY) as reader:
            result = await reader.result("tasks/result", {"taskId": task_id})  # waits for the end
        assert result["content"] == dumped(live), result
        async with caller(one, LEGACY) as maker:
            assert (await maker.result("tasks/result", {"taskId": task_id}))["content"] == dumped(live)

        drawing(llm)
        async with caller(one, MODERN) as maker:
            task_id = await maker.start("agent", "Draw a red dot and a blue dot.")
        async with caller(other, MODERN) as reader:
            seen = await reader.until(task_id, lambda read: read["status"] in TERMINAL)
        assert seen.statuses[-1] == "completed" and seen[-1]["result"]["content"] == dumped(live), seen[-1]
        async with caller(one, MODERN) as maker:
            assert (await maker.task(task_id))["result"]["content"] == dumped(live)

        # another subject gets what an unknown id gets, images or not
        async with (
            httpx2.AsyncClient(headers={"Authorization": "Bearer someone-else"}) as http,
            Client(streamable_http_client(other, http_client=http)) as stranger,
        ):
            with pytest.raises(MCPError, match=f"unknown run '{run_id}'"):
                await stranger.read_resource(f"meta-agent://runs/{run_id}")
        async with caller(other, MODERN, "Bearer someone-else") as stranger:
            assert (await stranger.error("tasks/get", {"taskId": task_id}))["message"] == f"unknown task {task_id!r}"
