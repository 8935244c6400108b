"""A child's result whose structured content is the same data as its text reaches the model once; where the text
says less, the structured content follows it. A real child on stdio (tests/fixtures/structured_server.py, and the
real postgres-mcp of examples/postgres where it is installed), our server in memory, and the model a fake OpenAI
endpoint that records what it was sent."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import TESTS, openai_env
from fake_llm import FakeLLM, openai_reply
from fault_harness import call, finished, serving
from mcp import Client
from postgres_example import CONFIG, Q3_WINNER, Shop, example_environ, shop  # noqa: F401  (a fixture)
from postgres_example import SERVER as POSTGRES_MCP
from structured_server import ROWS, ROWS_TEXT

from meta_agent.config.servers import ServerEntry, load_servers
from meta_agent.config.settings import Settings
from meta_agent.front.server import build_server

pytestmark = pytest.mark.anyio
SERVER = ServerEntry(command=sys.executable, args=(str(TESTS / "fixtures" / "structured_server.py"),))
ITEMS = "\n".join(json.dumps(row, indent=2) for row in ROWS)  # the SDK's text blocks, one per item


@pytest.mark.parametrize(
    ("tool", "model_reads"),
    [
        ("rows", ROWS_TEXT),  # postgres-mcp: the blocks again as `{"result": [...]}`
        ("greeting", "Hello from the structured server."),  # a str: `{"result": text}`
        ("row", json.dumps(ROWS[0], indent=2)),  # an object: its JSON dump
        ("items", ITEMS),  # a list: `{"result": [items]}`, a block per item
        ("summary", f"2 rows\nstructured content: {json.dumps({'rows': ROWS})}"),  # the text says less: both
    ],
)
async def test_the_model_reads_the_same_data_once(llm: FakeLLM, tool: str, model_reads: str) -> None:
    llm.reply(openai_reply(None, ("c1", f"s__{tool}", {})))
    llm.reply(openai_reply("Read it."))
    async with serving(llm, {"s": SERVER}) as (client, _engine):
        finished(await call(client, "agent", {"task": f"call {tool}"}))
    [answered] = [message for message in llm.requests[1].body["messages"] if message["role"] == "tool"]
    assert answered["content"] == model_reads


async def test_postgres_mcp_rows_reach_the_model_once(shop: Shop, llm: FakeLLM) -> None:  # noqa: F811  (the fixture)
    product, units = shop.q3_winner()
    llm.reply(openai_reply(None, ("q3", "pg__execute_sql", {"sql": Q3_WINNER})))
    llm.reply(openai_reply("Read it."))
    environ = openai_env(llm, base=example_environ(shop, POSTGRES_MCP=str(POSTGRES_MCP)))
    server = build_server(Settings(model="openai:fake-model"), load_servers(CONFIG, environ), environ)
    async with Client(server) as client:
        finished(await call(client, "agent", {"task": "Which product sold most in Q3 2026?"}))
    [answered] = [message for message in llm.requests[1].body["messages"] if message["role"] == "tool"]
    assert answered["content"] == str([{"product": product, "units": units}])
