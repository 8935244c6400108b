"""Which addresses a fetch may reach (meta_agent.shared.addresses): a table over the address classes and their IPv6 forms."""

from __future__ import annotations

import ipaddress
import re

import pytest

from meta_agent.shared.addresses import parse_networks, refusal

pytestmark = pytest.mark.quick


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("8.8.8.8", None),
        ("2606:4700:4700::1111", None),
        ("::ffff:8.8.8.8", None),  # a global IPv4 address in its mapped form
        ("64:ff9b::808:808", None),  # ... behind NAT64
        ("2002:808:808::1", None),  # ... in 6to4
        ("127.0.0.1", "a loopback address"),
        ("127.255.255.254", "a loopback address"),
        ("::1", "a loopback address"),
        ("0.0.0.0", "an unspecified address"),
        ("::", "an unspecified address"),
        ("0.1.2.3", "not a global address"),
        ("10.1.2.3", "a private address"),
        ("172.31.255.255", "a private address"),
        ("192.168.0.1", "a private address"),
        ("fc00::1", "a private address"),
        ("169.254.169.254", "the cloud metadata address (link-local)"),
        ("169.254.0.1", "a link-local address"),
        ("fe80::1", "a link-local address"),
        ("fec0::1", "a site-local address"),
        ("100.64.0.1", "a shared (carrier-grade NAT) address"),
        ("100.127.255.255", "a shared (carrier-grade NAT) address"),
        ("224.0.0.251", "a multicast address"),
        ("ff02::1", "a multicast address"),
        ("255.255.255.255", "the broadcast address"),
        ("240.0.0.1", "a reserved address"),
        ("192.0.2.1", "not a global address"),  # documentation
        ("2001:db8::1", "not a global address"),
        ("::ffff:10.0.0.1", "an IPv4-mapped form of 10.0.0.1, a private address"),
        ("64:ff9b::a9fe:a9fe", "a NAT64 form of 169.254.169.254, the cloud metadata address (link-local)"),
        ("2002:7f00:1::", "a 6to4 form of 127.0.0.1, a loopback address"),
        ("::127.0.0.1", "an IPv4-compatible form of 127.0.0.1, a loopback address"),
        ("::8.8.8.8", "a reserved address"),  # IPv4-compatible addresses are routed nowhere
        ("2001::1", "not a global address"),  # Teredo
    ],
)
def test_what_is_refused_and_why(address: str, why: str | None) -> None:
    assert refusal(ipaddress.ip_address(address)) == why


@pytest.mark.parametrize(
    ("allowed", "address", "let_through"),
    [
        ("127.0.0.1/32", "127.0.0.1", True),
        ("127.0.0.1/32", "::ffff:127.0.0.1", True),  # the same socket address
        ("127.0.0.1/32", "127.0.0.2", False),
        ("127.0.0.1/32", "::1", False),
        ("10.0.0.0/8, fd00::/8", "fd12::1", True),
        ("10.0.0.0/8", "10.255.0.1", True),
        ("10.0.0.0/8", "169.254.169.254", False),
        ("169.254.169.254", "169.254.169.254", True),  # a bare address is its /32
    ],
)
def test_the_allowed_networks_let_through_what_they_hold(allowed: str, address: str, let_through: bool) -> None:
    assert (refusal(ipaddress.ip_address(address), parse_networks(allowed)) is None) == let_through


def test_networks_are_parsed_from_a_comma_separated_list() -> None:
    assert parse_networks(None) == parse_networks(" , ") == ()
    assert parse_networks("10.1.2.3/8, ::1 ,") == (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("::1/128"))
    with pytest.raises(ValueError, match=re.escape("'10.0.0.0/33' is not a network")):
        parse_networks("127.0.0.1/32,10.0.0.0/33")
