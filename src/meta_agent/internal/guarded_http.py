"""An HTTP client for the fetches the model asks for (describe_image's URLs, image_gen's image URLs, every redirect of
them) that connects only to addresses `addresses.refusal` allows.

httpx2 resolves a host inside its connect, out of reach of a check made beforehand, and a second lookup could answer
otherwise (DNS rebinding). So its network backend is replaced by one that resolves the host once, checks every
address it resolves to, and connects to the checked address itself, as an IP literal; TLS still verifies and names
(SNI) the host of the URL, which httpcore passes to `start_tls` apart from the connect. Environment proxies are not
used (`trust_env=False`): a proxy would connect to whatever the URL names, past the check.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import ssl
from collections.abc import Iterable, Sequence

import anyio
import httpcore2
import httpx2

from meta_agent.shared.addresses import Address, Network, refusal


class AddressRefused(Exception):
    """A host the fetch may not connect to; `str(error)` says which address and why, on one line, such as
    `127.1 resolves to 127.0.0.1, a loopback address`."""


def guarded_client(allowed: Sequence[Network], *, headers: dict[str, str], timeout: float) -> httpx2.AsyncClient:
    """A client that follows no redirects, uses no environment proxy, and connects only to global unicast addresses
    and those in `allowed`; a connect it refuses raises `AddressRefused` out of the request, before any packet."""
    return httpx2.AsyncClient(
        headers=headers, timeout=timeout, follow_redirects=False, trust_env=False, transport=_Transport(allowed)
    )


class _Transport(httpx2.AsyncHTTPTransport):
    """httpx2's own transport over a connection pool with the guarded backend (httpx2 takes no network backend, so
    the pool it makes is replaced). Its TLS context verifies as httpx2's default does, SSL_CERT_FILE and SSL_CERT_DIR
    included."""

    def __init__(self, allowed: Sequence[Network]) -> None:
        super().__init__(verify=tls_context(), trust_env=False)
        self._pool = httpcore2.AsyncConnectionPool(ssl_context=tls_context(), network_backend=GuardedBackend(allowed))


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS context of every fetch, made once: loading the CA bundle takes tens of milliseconds."""
    return httpx2.create_ssl_context(trust_env=True)


class GuardedBackend(httpcore2.AsyncNetworkBackend):
    """httpcore's anyio backend behind one lookup and a check of each address it answers."""

    def __init__(self, allowed: Sequence[Network]) -> None:
        self._allowed = tuple(allowed)
        self._inner = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        """A stream to the first of `host`'s addresses that answers, all of them checked first.

        Raises:
            AddressRefused: `host` resolves to an address that is not allowed (nothing is connected).
            httpcore2.ConnectError: `host` does not resolve, or no address of it accepts the connection.
        """
        addresses = await _resolve(host, port)
        for address in addresses:
            why = refusal(address, self._allowed)
            if why is not None:
                raise AddressRefused(
                    f"{host} is {why}" if _literal(host) == address else f"{host} resolves to {address}, {why}"
                )
        failure: httpcore2.ConnectError | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    str(address), port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except httpcore2.ConnectError as exc:
                failure = exc
        assert failure is not None  # _resolve answers at least one address
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        raise AddressRefused(f"a Unix socket ({path}) is not a network address")

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


def _literal(host: str) -> Address | None:
    """The address `host` spells in standard form (`::ffff:127.0.0.1`, not `127.1`), None for a name."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


async def _resolve(host: str, port: int) -> list[Address]:
    """`host`'s addresses, from one lookup (an IP literal in any spelling the resolver takes is its own address).

    Raises:
        httpcore2.ConnectError: the host does not resolve.
    """
    try:
        answers = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError) as exc:  # ValueError: a name IDNA refuses
        raise httpcore2.ConnectError(f"cannot resolve {host}: {exc}") from None
    addresses = list(dict.fromkeys(ipaddress.ip_address(answer[4][0]) for answer in answers))
    if not addresses:
        raise httpcore2.ConnectError(f"{host} resolves to no address")
    return addresses
