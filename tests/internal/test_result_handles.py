"""Result handles: a tool result longer than META_AGENT_RESULT_INLINE_CHARS is kept whole for its run, the model gets
its head and a handle, and reads on with read_result. Driven through the SDK's real Client in memory (both protocol
eras) and `meta-agent run` as a subprocess, with a real child whose result is 2 MB, and the real openai SDK against a
fake model endpoint whose scripted replies use the handle the run gave."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import openai_env
from fake_llm import FakeLLM, openai_reply
from fault_server import TINY_PNG
from mcp import Client
from starlette.requests import Request
from starlette.responses import Response

from meta_agent.config.servers import ServerEntry
from meta_agent.config.settings import Settings
from meta_agent.core import tool_call
from meta_agent.core.messages import ImagePart, TextPart
from meta_agent.core.tools import RunContext, ToolOutcome
from meta_agent.front.server import build_server
from meta_agent.internal.read_result import DEFAULT_LENGTH, MAX_LENGTH, MAX_MATCHES, READ_RESULT

pytestmark = pytest.mark.anyio
ERAS = ["2026-07-28", "legacy"]
SIZE = 2_000_000
NEEDLE = "the vault code is 7291"
# A child whose one tool returns `size` characters of hay, 60 to a line, and the needle as the last line.
HAYSTACK = """
from mcp.server import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("hay")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def haystack(size: int, needle: str) -> str:
    line = "hay " * 14 + "hay\\n"
    return line * ((size - len(needle)) // len(line)) + needle


server.run()
"""
HAY_LINE = len("hay " * 14 + "hay\n")


def returned(size: int) -> int:
    """How many characters haystack returns for `size`."""
    return (size - len(NEEDLE)) // HAY_LINE * HAY_LINE + len(NEEDLE)


TOTAL = returned(SIZE)
AT = TOTAL - len(NEEDLE)  # where the needle starts
_HANDLE = re.compile(r"result-[0-9]+@[0-9A-Za-z]+")


class HandleLLM(FakeLLM):
    """The fake model endpoint, whose next reply has HANDLE replaced by the newest result handle of the request's
    messages: a scripted model that reads the handle it was given, as a real one would."""

    async def _answer(self, request: Request) -> Response:
        handles = _HANDLE.findall(json.dumps(json.loads(await request.body()).get("messages", [])))
        with self._lock:
            if handles and self.replies and isinstance(self.replies[0].body, dict):
                self.replies[0].body = json.loads(json.dumps(self.replies[0].body).replace("HANDLE", handles[-1]))
        return await super()._answer(request)


@pytest.fixture(scope="module")
def hay_llm() -> Iterator[HandleLLM]:
    with HandleLLM() as fake:
        yield fake


@pytest.fixture
def llm(hay_llm: HandleLLM) -> HandleLLM:
    hay_llm.clear()
    hay_llm.requests.clear()
    return hay_llm


@pytest.fixture(scope="module", params=ERAS)
async def client(request: pytest.FixtureRequest, hay_llm: HandleLLM) -> AsyncIterator[Client]:
    servers = {"hay": ServerEntry(command=sys.executable, args=("-c", HAYSTACK))}
    server = build_server(Settings(model="openai:fake-model"), servers, openai_env(hay_llm))
    async with Client(server, mode="legacy" if request.param == "legacy" else "auto") as connected:
        assert server.engine is not None
        await server.engine.pool.wait_settled()
        yield connected


def tool_texts(llm: FakeLLM, index: int) -> list[str]:
    """The tool results the model got in its `index`th request."""
    return [m["content"] for m in llm.requests[index].body["messages"] if m["role"] == "tool"]


def script(llm: FakeLLM, *reads: dict[str, Any], answer: str = "The code is 7291.") -> None:
    """The model calls haystack, then read_result with each of `reads` (HANDLE: the handle it got), then answers."""
    llm.reply(openai_reply(None, ("c0", "hay__haystack", {"size": SIZE, "needle": NEEDLE})))
    for number, arguments in enumerate(reads, start=1):
        llm.reply(openai_reply(None, (f"c{number}", "read_result", {"handle": "HANDLE", **arguments})))
    llm.reply(openai_reply(answer))


async def test_the_answer_at_the_end_of_2_mb_is_found_and_read(client: Client, llm: HandleLLM) -> None:
    script(llm, {"pattern": "vault code"}, {"offset": AT, "length": 100})
    result = await client.call_tool("agent", {"task": "What is the vault code?"})
    structured = result.structured_content
    assert structured is not None and structured["answer"] == "The code is 7291.", structured
    tag = structured["run_id"][-6:]
    # The model got the head, the size and the handle, not 2 MB.
    [kept] = tool_texts(llm, 1)
    assert kept.startswith("hay hay") and len(kept) < 4_500
    assert f"[result-1@{tag}: {TOTAL:,} characters, {TOTAL // HAY_LINE + 1:,} lines; the first 4,000 are above" in kept
    assert f'read_result(handle="result-1@{tag}", offset=4000)' in kept
    # The pattern found the needle's line with its offset; the slice there gave the needle, and said it was the end.
    found = tool_texts(llm, 2)[-1]
    assert found == f"[1 matching line in result-1@{tag} ({TOTAL:,} characters) from offset 0 for 'vault code']\n" + (
        f"offset {AT + len('the ')}: {NEEDLE}"
    )
    assert (
        tool_texts(llm, 3)[-1] == f"[result-1@{tag}: characters {AT}-{TOTAL} of {TOTAL:,}; this is the end]\n{NEEDLE}"
    )
    # Every request stayed small: the 2 MB result was never sent whole.
    assert max(len(json.dumps(seen.body)) for seen in llm.requests) < 20_000
    calls = [call["name"] for step in structured["steps"] for call in step["tool_calls"]]
    assert calls == ["hay.haystack", "read_result", "read_result"]


async def test_a_handle_of_another_run_is_refused(client: Client, llm: HandleLLM) -> None:
    script(llm, answer="Kept it.")
    first = await client.call_tool("agent", {"task": "Fetch the hay."})
    assert first.structured_content is not None
    conversation = first.structured_content["conversation_id"]
    llm.reply(openai_reply(None, ("c9", "read_result", {"handle": "HANDLE", "offset": AT})))
    llm.reply(openai_reply("It is gone."))
    second = await client.call_tool("agent", {"task": "Read the end of it.", "conversation_id": conversation})
    assert second.structured_content is not None and second.structured_content["answer"] == "It is gone."
    [record] = second.structured_content["steps"][0]["tool_calls"]
    old = f"result-1@{first.structured_content['run_id'][-6:]}"
    assert record["error"] == (
        f"read_result: {old} is a result of another run (an earlier turn or another call); a result is kept only for"
        " its own run: call its tool again"
    )


async def test_read_result_is_offered_to_the_model_not_to_hosts(client: Client, llm: HandleLLM) -> None:
    assert "read_result" not in {tool.name for tool in (await client.list_tools()).tools}
    llm.reply(openai_reply("nothing to read"))
    await client.call_tool("agent", {"task": "Say hello."})
    [offered] = [tool for tool in llm.requests[0].body["tools"] if tool["function"]["name"] == "read_result"]
    assert offered["function"]["parameters"]["required"] == ["handle"]


async def test_a_result_within_the_limit_is_whole(client: Client, llm: HandleLLM) -> None:
    llm.reply(openai_reply(None, ("c0", "hay__haystack", {"size": 19_000, "needle": NEEDLE})))
    llm.reply(openai_reply("ok"))
    await client.call_tool("agent", {"task": "Fetch a little hay."})
    [whole] = tool_texts(llm, 1)
    assert whole.endswith(NEEDLE) and "result-" not in whole and len(whole) > 18_900


async def test_without_read_result_a_long_result_is_cut_as_before(client: Client, llm: HandleLLM) -> None:
    """A caller's selector that leaves read_result out: nothing is kept, the text is cut with a marker."""
    llm.reply(openai_reply(None, ("c0", "hay__haystack", {"size": 30_000, "needle": NEEDLE})))
    llm.reply(openai_reply("ok"))
    await client.call_tool("agent", {"task": "Fetch hay.", "tools": ["hay.*"]})
    offered = {tool["function"]["name"] for tool in llm.requests[0].body["tools"]}
    assert offered == {"hay__haystack"}
    [cut] = tool_texts(llm, 1)
    total = returned(30_000)
    assert cut.endswith(f"\n[... cut {total - 20_000:,} of {total:,} characters]") and cut.startswith("hay hay")


def test_meta_agent_run_reads_the_end_of_a_2_mb_result(llm: HandleLLM, tmp_path: Path) -> None:
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"hay": {"command": sys.executable, "args": ["-c", HAYSTACK]}}}))
    script(llm, {"offset": TOTAL - 60})
    environ = openai_env(llm, model="openai:fake-model", base=os.environ)
    done = subprocess.run(
        [sys.executable, "-m", "meta_agent", "run", "What is the vault code?", "--config", str(config), "--json"],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["answer"] == "The code is 7291."
    tag = result["run_id"][-6:]
    assert f"[result-1@{tag}: {TOTAL:,} characters" in tool_texts(llm, 1)[0]
    header = f"[result-1@{tag}: characters {TOTAL - 60}-{TOTAL} of {TOTAL:,}; this is the end]\n"
    read = tool_texts(llm, 2)[-1]
    assert read.startswith(header) and read.endswith(NEEDLE) and len(read) == len(header) + 60
    assert "step 2 · read_result ok (" in done.stderr
    trace = (Path(environ["META_AGENT_TRACE_DIR"]) / f"{result['run_id']}.jsonl").read_text()
    finished = [json.loads(line) for line in trace.splitlines() if '"tool_call_finished"' in line]
    assert f"result-1@{tag}" in finished[0]["result"][0]["text"]  # the handle is in the trace...
    assert len(finished[0]["full_result"][0]["text"]) == TOTAL  # ...next to the whole result


# -- read_result on its own, with a run's context -------------------------------------------------------------------

RUN_ID = "01KAAAAAAAAAAAAAAAAAB7K2QZ"
TEXT = "".join(f"line {n} {'match' if n % 3 == 0 else 'plain'}\n" for n in range(200))


async def read(**arguments: Any) -> tuple[str, bool]:
    context = RunContext(results={"result-1@B7K2QZ": TEXT}, run_id=RUN_ID)
    assert READ_RESULT.run is not None
    outcome = await READ_RESULT.run(arguments, context)
    [part] = outcome.parts
    assert isinstance(part, TextPart)
    return part.text, outcome.is_error


async def test_slices_say_where_they_are() -> None:
    text, error = await read(handle="result-1@B7K2QZ")
    assert (
        not error and text == f"[result-1@B7K2QZ: characters 0-{len(TEXT)} of {len(TEXT):,}; this is the end]\n{TEXT}"
    )
    text, _ = await read(handle=" result-1@B7K2QZ ", offset=10, length=5)
    assert text == f"[result-1@B7K2QZ: characters 10-15 of {len(TEXT):,}; read on with offset=15]\n{TEXT[10:15]}"
    big = "y" * (MAX_LENGTH * 2)
    context = RunContext(results={"result-1@B7K2QZ": big}, run_id=RUN_ID)
    assert READ_RESULT.run is not None
    outcome = await READ_RESULT.run({"handle": "result-1@B7K2QZ", "length": MAX_LENGTH * 2}, context)
    assert isinstance(part := outcome.parts[0], TextPart) and part.text.endswith("\n" + "y" * MAX_LENGTH)
    outcome = await READ_RESULT.run({"handle": "result-1@B7K2QZ"}, context)
    assert isinstance(part := outcome.parts[0], TextPart) and f"offset={DEFAULT_LENGTH}]" in part.text


async def test_a_pattern_gives_capped_matching_lines_and_where_to_go_on() -> None:
    text, error = await read(handle="result-1@B7K2QZ", pattern=r"^line \d+ match$")
    lines = text.splitlines()
    assert not error and len(lines) == MAX_MATCHES + 1
    assert lines[0].startswith(f"[67 matching lines in result-1@B7K2QZ ({len(TEXT):,} characters) from offset 0 for")
    assert lines[1] == "offset 0: line 0 match"
    assert lines[-1] == f"offset {TEXT.index('line 87 match')}: line 87 match"
    resume = TEXT.index("line 88 ")
    assert lines[0].endswith(f"the first {MAX_MATCHES} are below: for the rest, call again with offset={resume}]")
    rest, _ = await read(handle="result-1@B7K2QZ", pattern="match", offset=resume)
    assert rest.splitlines()[0].startswith("[37 matching lines in") and rest.splitlines()[-1].endswith("line 177 match")
    none, _ = await read(handle="result-1@B7K2QZ", pattern="absent")
    assert none == f"[no matching line in result-1@B7K2QZ ({len(TEXT):,} characters) from offset 0 for 'absent']"


async def test_a_long_line_shows_the_part_around_its_match() -> None:
    context = RunContext(results={"result-1@B7K2QZ": "a" * 10_000 + "NEEDLE" + "b" * 10_000}, run_id=RUN_ID)
    assert READ_RESULT.run is not None
    outcome = await READ_RESULT.run({"handle": "result-1@B7K2QZ", "pattern": "NEEDLE"}, context)
    assert isinstance(part := outcome.parts[0], TextPart)
    assert part.text.splitlines()[1] == f"offset 10000: …{'a' * 80}NEEDLE{'b' * 214}…"


async def test_a_pattern_gets_one_second_across_all_its_lines() -> None:
    """Each line alone is quick ("(a|aa)+$" on 24 a's and a "!": some 40 ms), the 200 of them are not: one call of
    read_result gets one second in all, then it is refused in one line (Python's `re` took them all, seconds)."""
    context = RunContext(results={"result-1@B7K2QZ": ("a" * 24 + "!\n") * 200}, run_id=RUN_ID)
    assert READ_RESULT.run is not None
    started = time.monotonic()
    outcome = await READ_RESULT.run({"handle": "result-1@B7K2QZ", "pattern": "(a|aa)+$"}, context)
    assert isinstance(part := outcome.parts[0], TextPart) and outcome.is_error
    assert part.text == "read_result: the pattern took too long (over 1 s); use a simpler one"
    assert time.monotonic() - started < 10  # about 1 s: generous for a loaded machine


async def test_a_pattern_too_long_to_compile_quickly_is_refused() -> None:
    text, error = await read(handle="result-1@B7K2QZ", pattern="a" * 10_001)
    assert error and text == f"read_result: pattern '{'a' * 198}… is too long (10,001 characters; at most 10,000)"


@pytest.mark.parametrize(
    ("arguments", "line"),
    [
        ({"handle": "image-1"}, "'image-1' is not a result handle; a long result's notice names one, such as"),
        ({"handle": "result-2@B7K2QZ"}, "there is no result-2@B7K2QZ; this run's kept results are result-1@B7K2QZ"),
        ({"handle": "result-1@ZZZZZZ"}, "result-1@ZZZZZZ is a result of another run (an earlier turn or another"),
        ({"handle": "result-1@B7K2QZ", "pattern": "(unclosed"}, "pattern '(unclosed' is not a valid regex: missing )"),
        ({"handle": "result-1@B7K2QZ", "offset": 10**6}, "offset 1000000 is past the end of result-1@B7K2QZ ("),
        ({"handle": "result-1@B7K2QZ", "length": 0}, "length must be a whole number of at least 1, not 0"),
    ],
)
async def test_what_it_refuses_is_one_line(arguments: dict[str, Any], line: str) -> None:
    text, error = await read(**arguments)
    assert error and text.startswith(f"read_result: {line}") and "\n" not in text


def test_a_kept_result_keeps_its_images_named() -> None:
    """Text and images: the text parts become one head with the handle, the images keep their references."""
    image = ImagePart(data=base64.b64encode(TINY_PNG).decode(), mime_type="image/png")
    full = ToolOutcome(parts=(TextPart(text="a" * 30_000), image, TextPart(text="b" * 100)))
    shaped = tool_call.for_model(
        full, accepts_images=True, max_chars=20_000, image_refs=("image-3",), handle="result-1@B7K2QZ"
    )
    head, label, kept_image = shaped.parts
    assert isinstance(head, TextPart) and head.text.startswith("a" * 4_000 + "\n[result-1@B7K2QZ: 30,101 characters")
    assert isinstance(label, TextPart) and label.text == f"[image-3: image/png, {len(TINY_PNG)} bytes]"
    assert kept_image == image and tool_call.kept_text(full) == "a" * 30_000 + "\n" + "b" * 100
