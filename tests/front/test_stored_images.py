"""A run's images kept with its result in the run index (store/result_images.py), on the embedded SQLite file: the SDK's
real client against our real server in memory, image_gen through the real openai SDK to a fake images endpoint on
127.0.0.1. A result read back (the resource meta-agent://runs/{run_id}, after a restart too) carries the images the
call returned, and no more than a result carries: an images endpoint that answers with too many images, or one too
large, fills neither the result nor the database; the images go with what the views kept of the run. The same across
PostgreSQL replicas is tests/front/test_images_replicas.py's."""

from __future__ import annotations

import base64
import json
import sqlite3
from pathlib import Path
from typing import Any

import mcp.types as t
import pytest
from conftest import openai_env
from fake_llm import FakeLLM, images_reply, openai_reply
from fault_server import TINY_PNG
from mcp import Client
from mcp.shared.exceptions import MCPError

from meta_agent.config.settings import Settings
from meta_agent.core.result_images import MAX_RESULT_IMAGE_CHARS, MAX_RESULT_IMAGES
from meta_agent.front.server import MetaAgentServer, build_server
from meta_agent.front.tool_results import NOT_CARRIED

pytestmark = pytest.mark.anyio

IMAGE_MODEL = "openai:gpt-image-2.5-flare"  # the fake endpoint is local: image_gen needs its model set


def png(n: int) -> str:
    """A small PNG's base64, the `n`th of a kind: each one a distinct image."""
    return base64.b64encode(TINY_PNG + n.to_bytes(4, "big")).decode()


def server(llm: FakeLLM, path: Path) -> MetaAgentServer:
    settings = Settings(
        model="openai:fake-model", image_model=IMAGE_MODEL, conversations_db=path, trace_dir=path.parent
    )
    return build_server(settings, {}, openai_env(llm))


async def drawn(client: Client, llm: FakeLLM, *images: str) -> t.CallToolResult:
    """`ask`, whose model calls image_gen once, whose endpoint answers with `images` (whatever `n` asked for)."""
    llm.reply(openai_reply("Here.", ("c1", "image_gen", {"prompt": "dots", "n": 2})))
    llm.reply(images_reply(*images))
    result = await client.call_tool("ask", {"prompt": "Draw dots."})
    assert not result.is_error, result
    return result


def images_of(result: t.CallToolResult) -> list[tuple[str, str]]:
    return [(block.data, block.mime_type) for block in result.content if isinstance(block, t.ImageContent)]


def lines_of(result: t.CallToolResult) -> list[str]:
    return [block.text for block in result.content if isinstance(block, t.TextContent)]


async def read_back(client: Client, run_id: str) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The run's resource: its JSON, and its blobs (base64, media type) in order."""
    first, *rest = (await client.read_resource(f"meta-agent://runs/{run_id}")).contents
    assert isinstance(first, t.TextResourceContents) and first.mime_type == "application/json", first
    assert all(isinstance(blob, t.BlobResourceContents) for blob in rest), rest
    return json.loads(first.text), [(blob.blob, blob.mime_type or "") for blob in rest]  # type: ignore[union-attr]


def stored(path: Path) -> tuple[int, int]:
    """How many images the database holds, and how many characters of them."""
    with sqlite3.connect(path) as database:
        count, chars = database.execute("select count(*), coalesce(sum(length(data)), 0) from run_images").fetchone()
    return int(count), int(chars)


async def test_a_results_images_are_read_back_after_a_restart_until_they_are_pruned(
    llm: FakeLLM, tmp_path: Path
) -> None:
    path = tmp_path / "state.sqlite3"
    async with Client(server(llm, path)) as client:
        made = await drawn(client, llm, png(1), png(2))
    run_id = str(made.structured_content["run_id"])  # type: ignore[index]
    assert images_of(made) == [(png(1), "image/png"), (png(2), "image/png")]
    restarted = server(llm, path)
    async with Client(restarted) as client:
        state, blobs = await read_back(client, run_id)
        assert state["status"] == "done" and state["result"] == made.structured_content
        assert blobs == images_of(made) and "images_left_out" not in state
        assert restarted.engine is not None
        assert await restarted.engine.runs.forget_ended(1) == (0, 0)  # ended just now: kept
        assert (await restarted.engine.runs.forget_ended(-1))[1] == 2  # "ended before tomorrow"
        state, blobs = await read_back(client, run_id)
    assert blobs == [] and state["images_left_out"] == 2 and state["result"] == made.structured_content
    assert stored(path) == (0, 0)


async def test_an_endpoint_that_answers_too_many_images_fills_neither_the_result_nor_the_database(
    llm: FakeLLM, tmp_path: Path
) -> None:
    path = tmp_path / "state.sqlite3"
    served = [png(n) for n in range(MAX_RESULT_IMAGES + 4)]
    async with Client(server(llm, path)) as client:
        made = await drawn(client, llm, *served)
        state, blobs = await read_back(client, str(made.structured_content["run_id"]))  # type: ignore[index]
    assert images_of(made) == [(data, "image/png") for data in served[:MAX_RESULT_IMAGES]]
    assert lines_of(made)[-1].startswith(f"{NOT_CARRIED}4 (a result carries at most {MAX_RESULT_IMAGES} images")
    assert blobs == images_of(made) and state["images_left_out"] == 4
    assert stored(path) == (MAX_RESULT_IMAGES, sum(len(data) for data in served[:MAX_RESULT_IMAGES]))


async def test_an_image_over_the_bound_is_left_out_and_the_one_after_it_kept(llm: FakeLLM, tmp_path: Path) -> None:
    """An images endpoint answering with an image just past a result's size (its base64 alone) and a small one: the
    result, and the database, hold the small one; the result says one was left out."""
    path = tmp_path / "state.sqlite3"
    huge = base64.b64encode(bytes(MAX_RESULT_IMAGE_CHARS // 4 * 3 + 3)).decode()
    assert len(huge) > MAX_RESULT_IMAGE_CHARS
    async with Client(server(llm, path)) as client:
        made = await drawn(client, llm, huge, png(1))
        state, blobs = await read_back(client, str(made.structured_content["run_id"]))  # type: ignore[index]
    assert images_of(made) == [(png(1), "image/png")] and lines_of(made)[-1].startswith(f"{NOT_CARRIED}1 (")
    assert blobs == images_of(made) and state["images_left_out"] == 1
    assert stored(path) == (1, len(png(1)))


async def test_an_image_spoilt_in_the_database_is_a_resource_error_naming_it(llm: FakeLLM, tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    async with Client(server(llm, path)) as client:
        made = await drawn(client, llm, png(1), png(2))
        run_id = str(made.structured_content["run_id"])  # type: ignore[index]
        with sqlite3.connect(path) as database:
            database.execute("update run_images set data = 'not base64!' where seq = 2")
        with pytest.raises(MCPError, match=f"run '{run_id}': image 2 of its result is not base64 in the database"):
            await client.read_resource(f"meta-agent://runs/{run_id}")
