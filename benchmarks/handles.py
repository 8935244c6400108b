"""Result handles: what a run costs in model-request tokens when its answer is the last line of a 2 MB tool result,
read through a handle and `read_result`, against the same run with the result inlined.

Both runs are the real Engine with a real stdio child (hay_server.py) and a scripted model that reads what it was
given, as a real one would: with handles (the default META_AGENT_RESULT_INLINE_CHARS) it gets the result's head and
handle, calls `read_result(handle, pattern=...)` with the handle it read, and answers from the matching line; inlined
(the limit above the result's size) it answers from the whole result. Each answer is checked.

Tokens are counted with o200k_base (quicktok, offline, as tool_search.py does) over each request as the `openai:`
provider sends it to OpenAI: the JSON body of the Responses API (providers/openai_responses.py's own `request_body`: the
instructions, the transcript and every tool schema), summed over the run's requests.

    python benchmarks/handles.py   # this section alone
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
from common import QUIET
from tool_search import tokens

from meta_agent import (
    Engine,
    ModelRequest,
    ModelResponse,
    ScriptedProvider,
    ServerEntry,
    Settings,
    ToolCall,
    configure_logging,
)
from meta_agent.core.messages import ToolMessage, jsonable
from meta_agent.providers.openai_responses import request_body

HERE = Path(__file__).parent
SIZE = 2_000_000
NEEDLE = "the vault code is 7291"
TASK = "What is the vault code?"
INLINE_DEFAULT: int = Settings.model_fields["result_inline_chars"].default  # not the environment's own setting
WIRE_MODEL = "gpt-4o"  # o200k_base is its encoding; a model without reasoning, so no reasoning fields in the body
# Published context windows (tokens) of well-known models, to say which could take the inlined request at all.
WINDOWS = {"GPT-4o": 128_000, "Claude Sonnet 4.5": 200_000, "GPT-5": 400_000, "GPT-4.1, Gemini 2.5 Pro": 1_047_576}
_HANDLE = re.compile(r"result-[0-9]+@[0-9A-Za-z]+")
_CODE = re.compile(r"vault code is (\d+)")
CALL_HAY = ModelResponse(
    tool_calls=(ToolCall(id="c0", name="hay__haystack", arguments={"size": SIZE, "needle": NEEDLE}),)
)


def last_result(request: ModelRequest) -> str:
    """The text of the newest tool result the model was given."""
    message = request.messages[-1]
    assert isinstance(message, ToolMessage), message
    return message.results[-1].text


async def read_by_pattern(request: ModelRequest) -> ModelResponse:
    """The model's second turn with handles: read the handle from the result's notice and search the kept result."""
    handle = _HANDLE.findall(last_result(request))[-1]
    arguments = {"handle": handle, "pattern": "vault code"}
    return ModelResponse(tool_calls=(ToolCall(id="c1", name="read_result", arguments=arguments),))


async def answer(request: ModelRequest) -> ModelResponse:
    """The model's last turn: the code from the last line that names it in what it was just given."""
    found = _CODE.findall(last_result(request))
    return ModelResponse(text=f"The vault code is {found[-1]}." if found else "I could not find the vault code.")


def request_tokens(request: ModelRequest) -> int:
    return tokens(json.dumps(request_body(WIRE_MODEL, request), default=jsonable, ensure_ascii=False))


async def scripted_run(inline_chars: int, script: Sequence[Any]) -> list[ModelRequest]:
    """One agent run of the script against the hay child; the model requests it made."""
    with tempfile.TemporaryDirectory() as state:
        settings = Settings(
            model="scripted",
            result_inline_chars=inline_chars,
            trace_dir=Path(state) / "traces",
            conversations_db=Path(state) / "conversations.db",
        )
        servers = {"hay": ServerEntry(command=sys.executable, args=(str(HERE / "hay_server.py"),))}
        provider = ScriptedProvider(script)
        async with Engine(settings, servers, {}, provider=provider) as engine:
            result = await engine.run(TASK, mode="agent")
    provider.assert_done()
    if result.answer != "The vault code is 7291.":
        raise SystemExit(f"handles: the run with inline limit {inline_chars:,} answered {result.answer!r}")
    return provider.requests


def figures(requests: Sequence[ModelRequest]) -> dict[str, Any]:
    per = [request_tokens(request) for request in requests]
    return {"requests": len(per), "tokens per request": per, "tokens": sum(per)}


async def measure() -> dict[str, Any]:
    kept = await scripted_run(INLINE_DEFAULT, [CALL_HAY, read_by_pattern, answer])
    inlined = await scripted_run(SIZE * 2, [CALL_HAY, answer])
    whole = last_result(inlined[-1])
    return {
        "result characters": len(whole),
        "result tokens": tokens(whole),
        "inline limit": INLINE_DEFAULT,
        "handles": figures(kept),
        "inlined": figures(inlined),
    }


def section(r: dict[str, Any]) -> list[str]:
    """The RESULTS.md section."""
    kept, inlined = r["handles"], r["inlined"]
    carrying = max(inlined["tokens per request"])  # the request that carries the whole result
    past = [name for name, window in WINDOWS.items() if carrying > window]
    within = [name for name, window in WINDOWS.items() if carrying <= window]
    return [
        f"## Result handles (the answer on the last line of a {r['result characters']:,}-character tool result)",
        "",
        "A scripted `agent` run through the Engine and a stdio child (benchmarks/handles.py). Tokens: o200k_base"
        " (quicktok, offline) over each request's JSON as the `openai:` provider sends it to the Responses API"
        " (instructions, transcript, every tool schema).",
        "",
        "| run | model requests | tokens per request | tokens, all requests |",
        "|---|---|---|---|",
        f"| handle + `read_result(pattern=...)` (inline limit {r['inline limit']:,}) | {kept['requests']} |"
        f" {', '.join(f'{n:,}' for n in kept['tokens per request'])} | {kept['tokens']:,} |",
        f"| inlined (limit above the result's size) | {inlined['requests']} |"
        f" {', '.join(f'{n:,}' for n in inlined['tokens per request'])} | {inlined['tokens']:,} |",
        "",
        f"- With handles the whole run costs {kept['tokens']:,} tokens,"
        f" {kept['tokens'] / carrying:.1%} of the one inlined request that carries the result ({carrying:,} tokens;"
        f" the result alone is {r['result tokens']:,}), and every later request of an inlined run carries it again.",
        f"- That request is past the context window of {', '.join(past) or 'none of'}"
        + (f"; only {', '.join(within)} could take it." if within else "."),
        "",
    ]


if __name__ == "__main__":
    configure_logging("warning")
    print("\n".join(section(anyio.run(measure))))
    QUIET.close()
