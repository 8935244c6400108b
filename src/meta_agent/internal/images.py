"""Getting an image: from an http(s) URL (within a size cap and a time limit, redirects followed to http(s) only, and
only to global addresses or the networks META_AGENT_FETCH_ALLOW_NETWORKS allows) or a `data:image/...;base64,` URL
(its length checked before any of it is read), as an image part whose media type its first bytes say. describe_image
reads the images it is given with it, and image_gen the images an images API answers with as URLs.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import anyio
import httpx2

from meta_agent.core.messages import ImagePart
from meta_agent.shared.addresses import ALLOW_VARIABLE, Network
from meta_agent.shared.text import one_line
from meta_agent.version import __version__

USER_AGENT = f"meta-agent/{__version__}"  # some image hosts refuse requests that do not say who asks
_SHOWN_URL = 100  # characters of a URL repeated in an error
_SHOWN_HEAD = 4 * _SHOWN_URL  # characters of a URL read to show it (its white space is squeezed out)
# The first bytes of the formats vision APIs take: a server's content type is trusted only where these say nothing
# (Anthropic refuses an image whose media type does not match its bytes).
_SIGNATURES = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"GIF8", "image/gif"))
_DATA_HEADER = 200  # characters a data URL's `data:image/...;base64` may take before its comma
# Room in a data URL's payload for line breaks beside the base64 (MIME wraps it every 76 characters; "%0D%0A" takes
# 6): a payload longer than the cap's base64 and this is refused unread.
_LINE_BREAKS = 0.1
# A data URL's payload is read this many characters at a time (a longer one in a worker thread): each step holds the
# GIL a few milliseconds at most and copies no more than this.
_SLICE = 1 << 20
_SNIFFED = 12  # first bytes of an image read to tell its media type (WebP's signature ends at its 12th)
_MALFORMED = "the data URL's base64 is malformed"
# What a data URL's payload may hold beside base64: white space (as str.split() knows it), percent-escaped ASCII
# white space (skipped, as it was when unquoted) and the percent-escaped base64 signs.
_WHITE_SPACE = dict.fromkeys(
    map(
        ord,
        "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
        "\u2009\u200a\u2028\u2029\u202f\u205f\u3000",
    )
)
_ESCAPED = dict.fromkeys(("09", "0A", "0B", "0C", "0D", "1C", "1D", "1E", "1F", "20"), "") | {
    "2B": "+",
    "2F": "/",
    "3D": "=",
}
_ESCAPES = tuple(
    (f"%{spelling}", sign) for code, sign in _ESCAPED.items() for spelling in dict.fromkeys([code, code.lower()])
)


@dataclass(frozen=True, kw_only=True)
class FetchLimits:
    """How far a fetch goes for an image: its size in bytes (20 MB, about what vision APIs take in one
    image), the seconds a whole fetch may take, redirects included, how many redirects it follows, and the networks
    beside the global ones it may connect to (META_AGENT_FETCH_ALLOW_NETWORKS; none by default)."""

    max_bytes: int = 20_000_000
    timeout: float = 30.0
    max_redirects: int = 5
    allowed_networks: tuple[Network, ...] = ()


FETCH_LIMITS = FetchLimits()


class ImageRefused(Exception):
    """An image that cannot be had as asked; `str(error)` is one line saying why, for the model to read."""


async def decode_data_url(url: str, max_bytes: int) -> ImagePart:
    """The image of a `data:image/...;base64,` URL (white space around it allowed; in its base64 white space and
    percent-escaped white space are skipped, and %2B, %2F and %3D read as `+`, `/` and `=`). Its length is checked
    before any of it is copied or decoded: a 100 MB URL costs no more than a short one to refuse. A long one is then
    read in a worker thread, a slice at a time, its memory bounded by twice the image's base64.

    Raises:
        ImageRefused: another kind of data URL, malformed base64, or too large.
    """
    head = url[:_DATA_HEADER]
    start = len(head) - len(head.lstrip()) + len("data:")
    comma = url.find(",", start, _DATA_HEADER)
    media, *options = url[start : comma if comma >= 0 else _DATA_HEADER].split(";")
    mime = media.strip().lower()
    if comma < 0 or not mime.startswith("image/"):
        raise ImageRefused(f"the data URL holds {mime or 'text/plain'}, not an image (data:image/png;base64,...)")
    if "base64" not in (option.strip().lower() for option in options):
        raise ImageRefused("only base64 data URLs are accepted (data:image/png;base64,...)")
    if len(url) - comma - 1 > _encoded_length(max_bytes) * (1 + _LINE_BREAKS):
        raise ImageRefused(_too_large(max_bytes))
    if len(url) - comma - 1 <= _SLICE:
        return _payload_image(url, comma + 1, mime, max_bytes)
    return await anyio.to_thread.run_sync(_payload_image, url, comma + 1, mime, max_bytes)


def _payload_image(url: str, start: int, declared: str, max_bytes: int) -> ImagePart:
    """The image of the base64 in `url` from `start`: checked first, keeping nothing; then copied once where it holds
    nothing to skip, else read again and joined (its memory twice the image's base64 at most).

    Raises:
        ImageRefused: malformed base64, or over `max_bytes`.
    """
    check = _Base64Check(max_bytes)
    for piece in _payload_pieces(url, start):
        check.add(piece)
    end, last = check.finish()
    if check.length == len(url) - start and url.endswith(last):
        data = url[start:]
    else:  # the padding left out (all of it is at the end): a flood of `=` is not kept
        data = "".join(_ending_in([piece.rstrip("=") for piece in _payload_pieces(url, start)], end, last))
    return ImagePart(data=data, mime_type=_sniffed(check.head) or declared)


def _payload_pieces(url: str, start: int) -> Iterator[str]:
    """The base64 of a data URL's payload, a slice at a time, without its white space (percent-escaped or not) and
    with %2B, %2F and %3D read: each step copies one slice at most, in C, and lets go of the GIL between slices.

    Raises:
        ImageRefused: another percent escape.
    """
    while start < len(url):
        end = min(start + _SLICE, len(url))
        if end < len(url):  # an escape cut at the slice's end is read whole with the next slice
            cut = url.find("%", end - 2, end)
            end = cut if cut > start else end
        piece = url[start:end]
        start = end
        if "%" in piece:
            for escape, meant in _ESCAPES:
                piece = piece.replace(escape, meant)
            if "%" in piece:
                raise ImageRefused(_MALFORMED)
        yield piece.translate(_WHITE_SPACE)


class _Base64Check:
    """Base64 checked a piece at a time as `binascii.a2b_base64(strict_mode=True)` checks it whole (RFC 4648's
    alphabet; the padding a last short quantum needs, or any `=` after a whole one; nothing after it), the decoded
    size within a limit; nothing of it kept but its first bytes (they tell the media type)."""

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._pending = ""  # the last 1 to 4 characters before any padding, checked when the end is known
        self._padding = 0  # the `=` at the end so far
        self._size = 0
        self.length = 0  # characters added
        self.head = b""

    def add(self, piece: str) -> None:
        """Check all of `piece` but what may be the end.

        Raises:
            ImageRefused: malformed, or over the limit.
        """
        self.length += len(piece)
        padding = piece.find("=") if not self._padding else 0
        if padding >= 0:
            if piece.count("=", padding) != len(piece) - padding:
                raise ImageRefused(_MALFORMED)
            self._padding += len(piece) - padding
            piece = piece[:padding]
        text = self._pending + piece
        ready = max(0, (len(text) - 1) // 4 * 4)
        self._pending = text[ready:]
        if ready:
            self._decoded(text[:ready])

    def finish(self) -> tuple[int, str]:
        """How many characters the last quantum takes before any padding, and that quantum as base64 writes it (its
        unused bits zero, the padding it needs): so that the image's base64 is the usual one.

        Raises:
            ImageRefused: malformed, no bytes at all, or over the limit.
        """
        short = len(self._pending) % 4
        if short == 1 or (short and self._padding != 4 - short) or (self._padding and not self.length - self._padding):
            raise ImageRefused(_MALFORMED)
        raw = self._decoded(self._pending + "=" * (4 - short if short else 0))
        if not self._size:
            raise ImageRefused("the data URL holds no image data")
        return len(self._pending), binascii.b2a_base64(raw, newline=False).decode("ascii")

    def _decoded(self, text: str) -> bytes:
        try:
            raw = binascii.a2b_base64(text, strict_mode=True)
        except ValueError:  # binascii.Error, or a character that is not ASCII
            raise ImageRefused(_MALFORMED) from None
        self._size += len(raw)
        if self._size > self._max_bytes:
            raise ImageRefused(_too_large(self._max_bytes))
        if len(self.head) < _SNIFFED:
            self.head += raw[: _SNIFFED - len(self.head)]
        return raw


def _ending_in(pieces: list[str], cut: int, last: str) -> list[str]:
    """`pieces` with their last `cut` characters replaced by `last`."""
    while cut:
        piece = pieces.pop()
        if len(piece) > cut:
            pieces.append(piece[:-cut])
        cut = max(0, cut - len(piece))
    pieces.append(last)
    return pieces


def _too_large(max_bytes: int) -> str:
    return f"the data URL's image is larger than {max_bytes:,} bytes"


def _encoded_length(size: int) -> int:
    """The characters of `size` bytes in base64 (4 for every 3, padded)."""
    return -(-size // 3) * 4


async def fetch_image(url: str, limits: FetchLimits) -> ImagePart:
    """The image at an http(s) URL, within `limits`.

    Raises:
        ImageRefused: it could not be fetched in time, is not an image, or is too large.
    """
    shown = shown_url(url)
    try:
        with anyio.fail_after(limits.timeout):
            return await _get(url, shown, limits)
    except (TimeoutError, httpx2.TimeoutException):
        raise ImageRefused(f"fetching {shown} took longer than {limits.timeout:g} s") from None
    except (httpx2.HTTPError, httpx2.InvalidURL) as exc:
        raise ImageRefused(f"could not fetch {shown}: {type(exc).__name__}: {one_line(str(exc))}") from None


def shown_url(url: str) -> str:
    """`url` as an error repeats it: on one line, cut past `_SHOWN_URL` characters, a long one read no further than
    its head (a URL from the model may be megabytes long)."""
    head = one_line(url[:_SHOWN_HEAD], _SHOWN_URL)
    return head if len(url) <= _SHOWN_HEAD or head.endswith("…") else f"{head}…"


async def _get(url: str, shown: str, limits: FetchLimits) -> ImagePart:
    """GET `url`, following redirects to http(s) URLs only, at most `limits.max_redirects` of them; each connection
    (a redirect's too) only to an address the limits allow.

    Raises:
        ImageRefused: see `fetch_image`; an address refused names the URL and why.
    """
    from meta_agent.internal.guarded_http import AddressRefused, guarded_client  # httpcore2 loads on the first fetch

    headers = {"User-Agent": USER_AGENT, "Accept": "image/*"}
    async with guarded_client(limits.allowed_networks, headers=headers, timeout=limits.timeout) as http:
        hop = url
        for _ in range(limits.max_redirects + 1):
            try:
                got = await _hop(http, hop, shown, limits.max_bytes)
            except AddressRefused as exc:
                where = shown if hop == url else f"{shown_url(hop)} (where {shown} redirects)"
                raise ImageRefused(f"refused {where}: {exc}; set {ALLOW_VARIABLE} to allow it") from None
            if isinstance(got, ImagePart):
                return got
            hop = got
    raise ImageRefused(f"{shown} redirects more than {limits.max_redirects} times")


async def _hop(http: httpx2.AsyncClient, url: str, shown: str, max_bytes: int) -> ImagePart | str:
    """The image at `url`, or the http(s) URL it redirects to."""
    async with http.stream("GET", url) as response:
        if not response.has_redirect_location:
            return await _body(response, shown, max_bytes)
        target = urljoin(str(response.url), response.headers["location"])
    if urlsplit(target).scheme.lower() not in ("http", "https"):
        raise ImageRefused(f"{shown} redirects to {shown_url(target)}, which is not an http(s) URL")
    return target


async def _body(response: httpx2.Response, shown: str, max_bytes: int) -> ImagePart:
    """The image a response carries, read no further than `max_bytes`."""
    if not response.is_success:
        raise ImageRefused(f"{shown} answered HTTP {response.status_code}")
    mime = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    if not mime.startswith("image/"):
        raise ImageRefused(f"{shown} is {mime or 'of no content type'}, not an image")
    length = response.headers.get("content-length", "")
    if length.isdigit() and int(length) > max_bytes:
        raise ImageRefused(f"{shown} is larger than {max_bytes:,} bytes ({int(length):,})")
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > max_bytes:
            raise ImageRefused(f"{shown} is larger than {max_bytes:,} bytes")
    return _image_part(bytes(body), mime, shown)


def _image_part(raw: bytes, declared: str, shown: str) -> ImagePart:
    """`raw` as an image part, its media type what its first bytes say where they say it (WebP too).

    Raises:
        ImageRefused: no bytes at all.
    """
    if not raw:
        raise ImageRefused(f"{shown} holds no image data")
    return ImagePart(data=base64.b64encode(raw).decode("ascii"), mime_type=_sniffed(raw) or declared)


def _sniffed(raw: bytes) -> str | None:
    """The media type the first bytes of an image say, if they say one (WebP too)."""
    if raw[:4] == b"RIFF" and raw[8:12] == b"WEBP":
        return "image/webp"
    return next((mime for signature, mime in _SIGNATURES if raw.startswith(signature)), None)
