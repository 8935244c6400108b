"""What a run's result carries of the images its internal tools made (core/result_images.py): at most
MAX_RESULT_IMAGES images and MAX_RESULT_IMAGE_CHARS of their base64, in the order they came, an image past either
left out and counted, and only base64 as encoders write it, read a slice at a time. The same result is what every
replica returns of the run (tests/front/test_stored_images.py, tests/front/test_images_replicas.py)."""

from __future__ import annotations

import base64

import anyio
import pytest

from meta_agent.core.messages import ImagePart
from meta_agent.core.result_images import MAX_RESULT_IMAGE_CHARS, MAX_RESULT_IMAGES, ResultImages, image_bytes

pytestmark = [pytest.mark.anyio, pytest.mark.quick]

PNG = "image/png"
SLICE = 1 << 20  # the characters image_bytes reads at a time


def image(size: int, fill: int = 0) -> ImagePart:
    """An image of `size` bytes, its base64 as an encoder writes it."""
    return ImagePart(data=base64.b64encode(bytes([fill]) * size).decode(), mime_type=PNG)


async def gathered(*images: ImagePart) -> ResultImages:
    result = ResultImages()
    for one in images:
        await result.add(one)
    return result


async def test_images_within_the_bounds_are_kept_in_their_order() -> None:
    images = [image(3, fill) for fill in range(MAX_RESULT_IMAGES)]
    result = await gathered(*images)
    assert (result.kept, result.left_out) == (images, 0)


async def test_images_past_the_count_are_left_out_and_counted() -> None:
    images = [image(3, fill) for fill in range(MAX_RESULT_IMAGES + 5)]
    result = await gathered(*images)
    assert (result.kept, result.left_out) == (images[:MAX_RESULT_IMAGES], 5)


async def test_images_added_at_once_by_the_calls_of_a_step_keep_to_the_bounds() -> None:
    """Calls of one step end together: large images each checked in a worker thread do not all pass the bound
    while the others are being checked."""
    third = image((MAX_RESULT_IMAGE_CHARS // 3 - len(PNG)) // 4 * 3)  # three fit; a fourth does not
    result = ResultImages()
    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(result.add, third)
    assert (len(result.kept), result.left_out) == (3, 2)


async def test_an_image_over_the_size_is_left_out_and_a_smaller_one_after_it_still_fits() -> None:
    # the bound counts the base64 and the media type; base64 comes 4 characters for every 3 bytes
    room = (MAX_RESULT_IMAGE_CHARS - len(PNG)) // 4
    largest, over, small = image(room * 3), image(room * 3 + 1), image(3, 1)
    assert len(largest.data) + len(PNG) <= MAX_RESULT_IMAGE_CHARS < len(over.data) + len(PNG)
    assert (await gathered(largest)).kept == [largest]
    result = await gathered(over, small)
    assert (result.kept, result.left_out) == ([small], 1)
    result = await gathered(largest, small)  # the size is the images' together
    assert (result.kept, result.left_out) == ([largest], 1)


@pytest.mark.parametrize(
    "data",
    [
        "not base64!",  # characters beyond base64's
        "aGk",  # its padding left out
        "aGk=\n",  # a line break, as MIME would wrap it
        "aGl=",  # the bytes of "aGk=" ("hi"), spelled another way: a blob of them would be another text
        "aGk==",  # padding past the end
        "aGké=",  # beyond ASCII
        "aGk=" + "A" * SLICE,  # padding before the end, where a slice ends
        "A" * (SLICE - 4) + "aGk=" + "AAAA",  # the same, at the end of the first slice
        "A" * SLICE + "aGk",  # a long one whose padding is left out
    ],
)
async def test_an_image_that_is_not_base64_as_encoders_write_it_is_left_out(data: str) -> None:
    assert await image_bytes(data) is None
    small = image(3, 1)
    result = await gathered(ImagePart(data=data, mime_type=PNG), small)
    assert (result.kept, result.left_out) == ([small], 1)


@pytest.mark.parametrize("size", [0, 1, 2, 3, SLICE // 4 * 3, SLICE // 4 * 3 + 1, 3 * SLICE + 2])
async def test_base64_is_read_whole_across_slices(size: int) -> None:
    data = bytes(range(256)) * (size // 256) + bytes(range(size % 256))
    assert await image_bytes(base64.b64encode(data).decode()) == data


async def test_the_event_loop_runs_between_one_image_and_the_next() -> None:
    """A result's images read back one after another (the resource meta-agent://runs/{run_id}): each one a slice
    long is read in the event loop, and the loop goes on before the next, so sixteen of them do not hold it sixteen
    slices' time at once."""
    ran = 0

    async def other_work() -> None:
        nonlocal ran
        while True:
            ran += 1
            await anyio.lowlevel.checkpoint()

    longest = image(SLICE // 4 * 3)  # one slice of base64: the longest read in the event loop
    async with anyio.create_task_group() as tg:
        tg.start_soon(other_work)
        await anyio.lowlevel.checkpoint()
        before = ran
        for _ in range(MAX_RESULT_IMAGES):
            assert await image_bytes(longest.data) is not None
            assert ran > before  # the other work ran since the last image
            before = ran
        tg.cancel_scope.cancel()
