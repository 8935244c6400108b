"""Getting an image: from an http(s) URL (within a size cap and a time limit, redirects followed to http(s) only, and
only to global addresses or the networks META_AGENT_FETCH_ALLOW_NETWORKS allows) or a `data:image/...;base64,` URL
(its length checked before any of it is read), as an image part whose media type its first bytes say. describe_image
reads the images it is given with it, and image_gen the images an images API answers with as URLs.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from urllib.parse import unquote, urljoin, urlsplit

import anyio
import httpx2

from meta_agent.addresses import ALLOW_VARIABLE, Network
from meta_agent.core.messages import ImagePart
from meta_agent.text import one_line
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


def decode_data_url(url: str, max_bytes: int) -> ImagePart:
    """The image of a `data:image/...;base64,` URL (white space around it allowed). Its length is checked before any
    of it is copied or decoded: a 100 MB URL costs no more than a short one to refuse.

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
    too_large = f"the data URL's image is larger than {max_bytes:,} bytes"
    if len(url) - comma - 1 > _encoded_length(max_bytes) * (1 + _LINE_BREAKS):
        raise ImageRefused(too_large)
    payload = url[comma + 1 :]
    if "%" in payload:
        payload = unquote(payload)
    payload = "".join(payload.split())
    if len(payload) * 3 // 4 - payload.endswith("=") - payload.endswith("==") > max_bytes:
        raise ImageRefused(too_large)
    try:
        raw = base64.b64decode(payload, validate=True)
    except binascii.Error:
        raise ImageRefused("the data URL's base64 is malformed") from None
    return _image_part(raw, mime, "the data URL")


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
    sniffed = next((mime for signature, mime in _SIGNATURES if raw.startswith(signature)), None)
    if raw[:4] == b"RIFF" and raw[8:12] == b"WEBP":
        sniffed = "image/webp"
    return ImagePart(data=base64.b64encode(raw).decode("ascii"), mime_type=sniffed or declared)
