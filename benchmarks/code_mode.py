"""Code mode: what a task of thirty dependent lookups ("total the refunds of this chain of orders") costs in model
turns and in what is sent to the model, run as the plain loop (a tool call a turn) against code mode (one program).

Both runs are the real Engine with a real stdio child (orders_server.py: each order names the next, so the lookups
depend on each other) and the same scripted model, which reads what it was given as a real one would: in the plain
loop it looks up the order the last result named, and totals the refunds of every result once the chain ends; in
code mode it writes one program that walks the chain and prints the total, and answers from what was printed. Each
answer is checked.

Bytes are the UTF-8 JSON body of each request as the `openai:` provider sends it to the Responses API
(providers/openai_responses.py's own `request_body`: instructions, transcript, every tool schema); tokens are
o200k_base (quicktok, offline, as tool_search.py counts) over the same body, summed over the run's requests.

    python benchmarks/code_mode.py   # this section alone
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
from common import QUIET
from handles import WIRE_MODEL
from orders_server import COUNT, order
from tool_search import tokens

from meta_agent import Engine, ModelRequest, ModelResponse, ScriptedProvider, ServerEntry, Settings, configure_logging
from meta_agent.core.messages import ToolCall, ToolMessage, jsonable
from meta_agent.providers.openai_responses import request_body

HERE = Path(__file__).parent
TASK = (
    f"Start at order A1 and follow each order's `next` to the end of the chain ({COUNT} orders): total their refunds."
)
EXPECTED = round(sum(order(number).refund for number in range(1, COUNT + 1)), 2)
PROGRAM = """\
total, order_id, seen = 0.0, "A1", 0
while order_id:
    order = call_tool("shop.get_order", {"id": order_id})
    total += order["refund"]
    order_id = order["next"]
    seen += 1
print(seen, "orders, refunds total", round(total, 2))
"""


def results_of(request: ModelRequest) -> list[str]:
    """Every tool result the model was given so far, oldest first."""
    return [result.text for m in request.messages if isinstance(m, ToolMessage) for result in m.results]


def total_line(total: float) -> ModelResponse:
    return ModelResponse(text=f"The refunds total {total:.2f}.")


async def plain_turn(request: ModelRequest) -> ModelResponse:
    """The plain loop's model: look up the order the last one named; at the chain's end, total every refund."""
    seen = [json.loads(text) for text in results_of(request)]
    if not seen:
        return ModelResponse(tool_calls=(ToolCall(id="c0", name="shop__get_order", arguments={"id": "A1"}),))
    if seen[-1]["next"] is not None:
        call = ToolCall(id=f"c{len(seen)}", name="shop__get_order", arguments={"id": seen[-1]["next"]})
        return ModelResponse(tool_calls=(call,))
    return total_line(round(sum(found["refund"] for found in seen), 2))


async def code_turn(request: ModelRequest) -> ModelResponse:
    """Code mode's model: one program first, then the answer from what it printed."""
    printed = results_of(request)
    if not printed:
        return ModelResponse(tool_calls=(ToolCall(id="c0", name="run_code", arguments={"code": PROGRAM}),))
    return total_line(float(printed[-1].split()[-1]))


async def scripted_run(turn: Any, **arguments: Any) -> list[ModelRequest]:
    """One agent run against the shop child, its model answering each request with `turn`; the requests it made."""
    with tempfile.TemporaryDirectory() as state:
        settings = Settings(
            model="scripted", trace_dir=Path(state) / "traces", conversations_db=Path(state) / "conversations.db"
        )
        servers = {"shop": ServerEntry(command=sys.executable, args=(str(HERE / "orders_server.py"),))}
        provider = ScriptedProvider([turn] * (COUNT + 2))
        async with Engine(settings, servers, {}, provider=provider) as engine:
            result = await engine.run(TASK, mode="agent", **arguments)
    if result.answer != f"The refunds total {EXPECTED:.2f}.":
        raise SystemExit(f"code_mode: the run with {arguments} answered {result.answer!r} ({result.stop_reason})")
    return provider.requests


def figures(requests: Sequence[ModelRequest]) -> dict[str, Any]:
    bodies = [json.dumps(request_body(WIRE_MODEL, r), default=jsonable, ensure_ascii=False) for r in requests]
    return {
        "model turns": len(bodies),
        "bytes": sum(len(body.encode()) for body in bodies),
        "tokens": sum(tokens(body) for body in bodies),
    }


async def measure() -> dict[str, Any]:
    plain = figures(await scripted_run(plain_turn, max_steps=COUNT + 2, code=False))
    coded = figures(await scripted_run(code_turn, code=True))
    return {"lookups": COUNT, "plain": plain, "code": coded}


def section(r: dict[str, Any]) -> list[str]:
    """The RESULTS.md section."""
    plain, coded = r["plain"], r["code"]
    fewer = 1 - coded["tokens"] / plain["tokens"]
    met = fewer >= 0.9 and coded["model turns"] <= 2
    return [
        f"## Code mode ({r['lookups']} dependent lookups, their refunds totalled)",
        "",
        "The same scripted model through the Engine and a stdio child (benchmarks/code_mode.py): the plain loop, a"
        " lookup a model turn, against code mode, one `run_code` program that walks the chain and prints the total."
        " Bytes and tokens (o200k_base, quicktok) are of every request's JSON as the `openai:` provider sends it to the"
        " Responses API, summed over the run.",
        "",
        "| run | model turns | bytes sent to the model | tokens sent to the model |",
        "|---|---|---|---|",
        f"| plain loop | {plain['model turns']} | {plain['bytes']:,} | {plain['tokens']:,} |",
        f"| code mode | {coded['model turns']} | {coded['bytes']:,} | {coded['tokens']:,} |",
        "",
        f"- Code mode sent {fewer:.1%} fewer tokens in {coded['model turns']} model turns (goal: at least 90% fewer, at"
        f" most 2 turns: {'met' if met else 'NOT met'}).",
        "",
    ]


if __name__ == "__main__":
    configure_logging("warning")
    print("\n".join(section(anyio.run(measure))))
    QUIET.close()
