"""A long data URL under the size cap is read beside other work, in memory bounded by the image it holds.

The cap refuses a data URL whose payload is longer than the base64 of 20 MB (with room for line breaks) unread. Under
it, a payload of 29 million characters can still be mostly white space or percent-escaped line breaks: it is read in a
worker thread, a slice at a time, never split into millions of strings. Each case goes through describe_image's own
run with a scripted model, which notes how often a concurrent task ran before the model was asked for the image.
"""

from __future__ import annotations

import tracemalloc

import anyio
import anyio.lowlevel
import pytest

from meta_agent.core.messages import ImagePart, ModelRequest, ModelResponse, TextPart
from meta_agent.core.tools import RunContext
from meta_agent.internal.describe_image import describe_image_tool
from meta_agent.providers.scripted import ScriptedProvider

pytestmark = [pytest.mark.anyio, pytest.mark.quick]

REPEATS = 7_300_000  # each payload is 29.2 million characters, under the cap's 29.3 million
# Payloads under the cap, and the base64 characters each holds once its white space is skipped.
PAYLOADS = {
    "percent-escaped line breaks": ("A%0A" * REPEATS, REPEATS),
    "a space every three characters": ("AAA " * REPEATS, 3 * REPEATS),
}
# Memory a read may take beyond the image's base64 read twice (kept, and joined): a slice and the interpreter's own.
SLACK = 8_000_000


@pytest.mark.parametrize("name", PAYLOADS)
async def test_a_long_data_url_is_read_off_the_event_loop_in_memory_bounded_by_its_image(name: str) -> None:
    payload, characters = PAYLOADS[name]
    url = "data:image/png;base64," + payload
    ticks = 0
    ticks_when_asked: list[int] = []

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await anyio.lowlevel.checkpoint()

    async def answer(request: ModelRequest) -> ModelResponse:
        ticks_when_asked.append(ticks)
        return ModelResponse(text="nothing but zeros")

    provider = ScriptedProvider([answer])
    run = describe_image_tool(None, {}).run
    assert run is not None
    tracemalloc.start()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(tick)
            await anyio.lowlevel.checkpoint()  # the ticker has started
            before = ticks
            with anyio.fail_after(60):
                outcome = await run({"image": url}, RunContext(model=provider))
            tg.cancel_scope.cancel()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [part.text for part in outcome.parts if isinstance(part, TextPart)] == ["nothing but zeros"]
    [image] = [part for part in provider.requests[0].messages[0].parts if isinstance(part, ImagePart)]  # type: ignore[union-attr]
    assert (image.mime_type, len(image.data), image.data.strip("A")) == ("image/png", characters, "")
    # Before the model was asked, only the reading of the URL ran: the ticker ran meanwhile, so it held no event loop.
    ticked = ticks_when_asked[0] - before
    assert (ticked > 0, peak < 2 * characters + SLACK) == (True, True), (name, ticked, peak)
