"""What a run's result carries of the images its internal tools made (image_gen), and how their base64 is checked.

The result goes to its host whole, and the run index keeps it whole for every replica to return alike
(meta_agent.store.result_images), so what it carries is bounded here, where it is made: MAX_RESULT_IMAGES images and
MAX_RESULT_IMAGE_CHARS of their base64 and media types together. An image past either is left out of the result, and
counted (`RunResult.images_left_out`), so is one whose data is not base64 as encoders write it.

Base64 is read a slice at a time, in a worker thread where it is long: each slice holds the interpreter's lock a few
milliseconds at most, so the event loop goes on while an image of many megabytes is checked or decoded.
"""

from __future__ import annotations

import binascii

import anyio

from meta_agent.core.messages import ImagePart

MAX_RESULT_IMAGES = 16  # image_gen's most in one call (10), and a few more calls' worth
MAX_RESULT_IMAGE_CHARS = 32 * 2**20  # 32 MiB of base64: 24 MiB of images, a 20 MB fetched image among them
_SLICE = 1 << 20  # characters of base64 read at a time (a multiple of 4); a longer image is read in a worker thread


class ResultImages:
    """The images a run's result carries, gathered as its internal tools make them, in that order: each one that
    still fits the bounds is kept, and one that does not is left out (`left_out` counts them), so a huge image does
    not crowd out the small ones after it. An image whose data is not base64 as encoders write it (the one spelling of
    its bytes) is left out too: no host could be sure to show it, and a blob of its bytes (the resource
    meta-agent://runs/{run_id}) would be another text."""

    def __init__(self) -> None:
        self.kept: list[ImagePart] = []
        self.left_out = 0
        self._chars = 0
        self._lock = anyio.Lock()  # the calls of a step add at once: one image is weighed at a time, in their order

    async def add(self, image: ImagePart) -> None:
        chars = len(image.data) + len(image.mime_type)
        async with self._lock:
            fits = len(self.kept) < MAX_RESULT_IMAGES and self._chars + chars <= MAX_RESULT_IMAGE_CHARS
            if fits and await image_bytes(image.data) is not None:
                self.kept.append(image)
                self._chars += chars
            else:
                self.left_out += 1


async def image_bytes(data: str) -> bytes | None:
    """The bytes of `data`, where it is base64 as encoders write it (padded, no white space, its last character's
    unused bits zero); else None. A long one is read in a worker thread; a short one in the event loop, which then
    goes on before anything else is read (a result's sixteen images of a slice each would hold it sixteen times as
    long)."""
    if len(data) > _SLICE:
        return await anyio.to_thread.run_sync(_decoded, data)
    decoded = _decoded(data)
    await anyio.lowlevel.checkpoint()
    return decoded


def _decoded(data: str) -> bytes | None:
    if len(data) % 4:
        return None
    pieces = []
    for start in range(0, len(data), _SLICE):
        piece = data[start : start + _SLICE]
        try:
            raw = binascii.a2b_base64(piece, strict_mode=True)
        except (binascii.Error, ValueError):  # ValueError: a character beyond ASCII
            return None
        last = start + _SLICE >= len(data)
        if not last and len(raw) * 4 != len(piece) * 3:  # padding before the end
            return None
        if binascii.b2a_base64(raw, newline=False) != piece.encode("ascii"):
            return None
        pieces.append(raw)
    return b"".join(pieces)
