"""The PostgreSQL example (examples/postgres) end to end, as its README runs it: a throwaway cluster made by its
start-db, the real postgres-mcp server launched from its servers.json, and "which product sold most in Q3? then
draw it" answered from the database and drawn by image_gen.

Before each run the test changes the Q3 figures by a random amount and reads the expected answer with its own query,
so an answer that carries that number shows that the SQL the model asked for really ran. Skipped where there are no
PostgreSQL server binaries or no installed postgres-mcp (examples/postgres/install-server); required under CI=true.
"""

from __future__ import annotations

import ast
import base64
import subprocess
import sys
from pathlib import Path
from typing import Any

import mcp.types as t
import pytest
from conftest import ProgressLog, check_children, openai_env
from fake_llm import FakeLLM, images_reply, openai_reply
from fault_server import TINY_PNG
from mcp import Client
from postgres_example import (
    CONFIG,
    Q3_WINNER,
    ROOT,
    SERVER,
    Shop,
    example_environ,
    shop,  # noqa: F401  (a fixture)
)

from meta_agent.config.servers import load_servers
from meta_agent.config.settings import Settings
from meta_agent.core.messages import ModelRequest, ModelResponse, TextPart, ToolCall, ToolMessage
from meta_agent.front.server import build_server
from meta_agent.providers.scripted import ScriptedProvider

pytestmark = pytest.mark.anyio
TASK = "Which product sold most in Q3 2026? Then draw it."
IMAGE_MODEL = "openai:gpt-image-1"
PNG = base64.b64encode(TINY_PNG).decode()


def test_check_starts_the_server_from_the_repository_root(shop: Shop) -> None:  # noqa: F811  (the fixture)
    # As the README runs it: from the repository root, the server found where install-server put it.
    result = subprocess.run(
        [sys.executable, "-m", "meta_agent", "check", "--config", "examples/postgres/servers.json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=example_environ(shop),
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    [line] = check_children(result.stdout)
    assert line.split()[:2] == ["pg", "ready"] and "5 tools" in line, line


def tool_text(request: ModelRequest, alias: str) -> str:
    """The text of the latest result of the tool `alias` that the model is shown in this request, a line a part."""
    for message in reversed(request.messages):
        if isinstance(message, ToolMessage):
            for result in message.results:
                if result.name == alias:
                    assert not result.is_error, result.parts
                    return "\n".join(part.text for part in result.parts if isinstance(part, TextPart))
    raise AssertionError(f"no result of {alias} in the request")


def q3_leader(request: ModelRequest) -> dict[str, Any]:
    """The row postgres-mcp returned for the Q3 query: it prints rows as a Python list of dicts, on the first line
    (its structured content only repeats that text, so the model is shown the text alone)."""
    [row] = ast.literal_eval(tool_text(request, "pg__execute_sql").splitlines()[0])
    return dict(row)


def a_model_that_reads_its_results() -> ScriptedProvider:
    """A scripted model whose every number comes from the tool results it is shown, never from the script."""

    async def ask_the_database(request: ModelRequest) -> ModelResponse:
        assert {"pg__execute_sql", "image_gen"} <= {tool.name for tool in request.tools}
        return ModelResponse(tool_calls=(ToolCall(id="q3", name="pg__execute_sql", arguments={"sql": Q3_WINNER}),))

    async def draw_the_winner(request: ModelRequest) -> ModelResponse:
        leader = q3_leader(request)
        prompt = f"A poster of the {leader['product'].lower()}: {leader['units']} sold in the summer of 2026"
        return ModelResponse(tool_calls=(ToolCall(id="draw", name="image_gen", arguments={"prompt": prompt}),))

    async def answer(request: ModelRequest) -> ModelResponse:
        assert tool_text(request, "image_gen").startswith("generated 1 image")
        leader = q3_leader(request)
        return ModelResponse(text=f"{leader['product']} sold most in Q3 2026: {leader['units']} units. Drawn below.")

    return ScriptedProvider([ask_the_database, draw_the_winner, answer])


async def test_the_q3_question_is_answered_from_the_database_and_drawn(shop: Shop, llm: FakeLLM) -> None:  # noqa: F811  (the fixture)
    product, units = shop.q3_winner()
    llm.reply(images_reply(PNG))
    environ = openai_env(llm, base=example_environ(shop, POSTGRES_MCP=str(SERVER)))
    model = a_model_that_reads_its_results()
    server = build_server(Settings(image_model=IMAGE_MODEL), load_servers(CONFIG, environ), environ, provider=model)
    progress = ProgressLog()
    async with Client(server) as client:
        result = await client.call_tool("agent", {"task": TASK}, progress_callback=progress)
    texts = [block.text for block in result.content if isinstance(block, t.TextContent)]
    assert not result.is_error, texts
    assert texts == [f"{product} sold most in Q3 2026: {units} units. Drawn below."]
    assert [(block.data, block.mime_type) for block in result.content if isinstance(block, t.ImageContent)] == [
        (PNG, "image/png")
    ]
    structured = result.structured_content
    assert structured is not None and structured["stop_reason"] == "final"
    calls = [(call["name"], call["ok"]) for step in structured["steps"] for call in step["tool_calls"]]
    assert calls == [("pg.execute_sql", True), ("image_gen", True)]
    [drawn] = llm.requests
    assert drawn.body["prompt"] == f"A poster of the {product.lower()}: {units} sold in the summer of 2026"
    steps = [message.split(" {")[0].split(" (")[0] for message in progress.messages[1:]]  # arguments and times cut
    assert steps == [
        "step 1 · model",
        "step 1 · call pg.execute_sql",
        "step 1 · pg.execute_sql ok",
        "step 2 · model",
        "step 2 · call image_gen",
        "step 2 · image_gen ok",
        "step 3 · model",
        "done · final",
    ]
    model.assert_done()


def test_meta_agent_run_as_the_readme_shows(shop: Shop, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811  (the fixture)
    # `meta-agent run` in a shell, a model behind OPENAI_BASE_URL; images land in the current directory.
    product, units = shop.q3_winner()
    llm.reply(openai_reply(None, ("q3", "pg__execute_sql", {"sql": Q3_WINNER})))
    llm.reply(openai_reply(None, ("draw", "image_gen", {"prompt": "a solar lantern on a summer night"})))
    llm.reply(images_reply(PNG))
    llm.reply(openai_reply("The solar lantern won the third quarter; here it is."))
    environ = openai_env(
        llm,
        model="openai:fake-model",
        base=example_environ(shop, POSTGRES_MCP=str(SERVER)),
        META_AGENT_IMAGE_MODEL=IMAGE_MODEL,
    )
    result = subprocess.run(
        [sys.executable, "-m", "meta_agent", "run", "--config", str(CONFIG), TASK],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "The solar lantern won the third quarter; here it is.\n"
    # What the model was shown after its query: the database's row, with the number no script knew.
    shown = llm.requests[1].body["messages"][-1]
    assert shown["role"] == "tool"
    assert shown["content"].splitlines()[0] == str([{"product": product, "units": units}])
    [image] = tmp_path.glob("meta-agent-*-1.png")
    assert image.read_bytes() == TINY_PNG
