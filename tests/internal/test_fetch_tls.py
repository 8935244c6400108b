"""TLS of the guarded fetches: the connection goes to the address checked, as an IP literal, while TLS names the
URL's host (SNI) and verifies its certificate against that name, as httpx2 does when it connects by name."""

from __future__ import annotations

import base64
import socket
import socketserver
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from fault_server import TINY_PNG
from tls_files import certificate

from meta_agent.internal.guarded_http import tls_context
from meta_agent.internal.images import FetchLimits, ImageRefused, fetch_image
from meta_agent.shared.addresses import parse_networks

pytestmark = [pytest.mark.anyio, pytest.mark.quick]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Names under .tls.test resolve to 127.0.0.1, counted; names elsewhere resolve as they do."""
    real = socket.getaddrinfo
    lookups: dict[str, int] = {}

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)
        if not name.endswith(".tls.test"):
            return real(host, port, *args, **kwargs)
        lookups[name] = lookups.get(name, 0) + 1
        return real("127.0.0.1", port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return lookups


@contextmanager
def tls_image_host(tmp_path: Path, host: str) -> Iterator[tuple[int, Path, list[str]]]:
    """An HTTPS server on 127.0.0.1 with a certificate for `host` only, from a CA of its own, answering TINY_PNG: its
    port, the CA's file, and the server names (SNI) clients asked for."""
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "meta-agent fetch test CA")])
    ca = certificate(ca_name, ca_name, ca_key.public_key(), ca_key, x509.BasicConstraints(ca=True, path_length=None))
    leaf_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    leaf = certificate(leaf_name, ca_name, key.public_key(), ca_key, x509.SubjectAlternativeName([x509.DNSName(host)]))
    (tmp_path / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "leaf.pem").write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(tmp_path / "leaf.pem", tmp_path / "key.pem")
    names: list[str] = []

    def heard(_sock: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> None:
        names.append(str(name))

    tls.sni_callback = heard

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            try:
                with tls.wrap_socket(self.request, server_side=True) as stream:
                    stream.recv(65536)
                    head = f"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: {len(TINY_PNG)}\r\n\r\n"
                    stream.sendall(head.encode() + TINY_PNG)
            except (ssl.SSLError, OSError):  # the client refused the certificate
                pass

    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler) as server:
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        try:
            yield server.server_address[1], tmp_path / "ca.pem", names
        finally:
            server.shutdown()
            thread.join(timeout=10)


async def test_tls_verifies_and_names_the_host_while_the_connection_goes_to_the_checked_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, resolver: dict[str, int]
) -> None:
    """The connection goes to the address checked, as an IP literal, yet TLS still names the URL's host (SNI) and
    verifies the certificate against it: a host the certificate is not for is refused, though at the same address."""
    with tls_image_host(tmp_path, "images.tls.test") as (port, ca_file, names):
        monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
        tls_context.cache_clear()  # made again, trusting the test's CA
        limits = FetchLimits(allowed_networks=parse_networks("127.0.0.1/32"))
        try:
            image = await fetch_image(f"https://images.tls.test:{port}/cat.png", limits)
            with pytest.raises(ImageRefused) as caught:
                await fetch_image(f"https://other.tls.test:{port}/cat.png", limits)
        finally:
            tls_context.cache_clear()
    assert base64.b64decode(image.data) == TINY_PNG
    assert "CERTIFICATE_VERIFY_FAILED" in str(caught.value) and "\n" not in str(caught.value)
    assert names == ["images.tls.test", "other.tls.test"]
    assert resolver == {"images.tls.test": 1, "other.tls.test": 1}
