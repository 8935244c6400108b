"""Which addresses a fetch the model asks for may reach: global unicast ones, and those in the networks
META_AGENT_FETCH_ALLOW_NETWORKS allows (README, MCP tools: describe_image). Everything else is inside a network — this
machine, a private or link-local network (the cloud metadata address among them), a carrier's NAT — or no host at all,
and is refused, in whatever IPv6 form it is written. Pure functions over the standard `ipaddress` module, so the
settings check them at start.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import TypeAlias

Address: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
Network: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network

ALLOW_VARIABLE = "META_AGENT_FETCH_ALLOW_NETWORKS"
METADATA = ipaddress.IPv4Address("169.254.169.254")  # where cloud hosts answer with their credentials
SHARED = ipaddress.IPv4Network("100.64.0.0/10")  # carrier-grade NAT (RFC 6598): inside a provider's network
BROADCAST = ipaddress.IPv4Address("255.255.255.255")
RFC1918 = tuple(ipaddress.IPv4Network(cidr) for cidr in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))
UNIQUE_LOCAL = ipaddress.IPv6Network("fc00::/7")  # IPv6's private networks
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # the well-known NAT64 prefix: its last 32 bits are an IPv4 address
_COMPATIBLE = "an IPv4-compatible form"  # deprecated (RFC 4291) and routed nowhere: reserved, whatever it holds


def parse_networks(text: str | None) -> tuple[Network, ...]:
    """The networks of a comma-separated list of CIDRs (`127.0.0.1/32,10.0.0.0/8`; a bare address is its /32 or
    /128); none for None or blank.

    Raises:
        ValueError: an entry that is not a network, named.
    """
    networks: list[Network] = []
    for entry in (text or "").split(","):
        if not entry.strip():
            continue
        try:
            networks.append(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError:
            raise ValueError(
                f"{entry.strip()!r} is not a network; give CIDRs separated by commas, e.g. 127.0.0.1/32,10.0.0.0/8"
            ) from None
    return tuple(networks)


def refusal(address: Address, allowed: Sequence[Network] = ()) -> str | None:
    """Why a fetch may not connect to `address`, as `a loopback address`; None where it may: a global unicast
    address, or one inside `allowed` (an IPv4-mapped IPv6 address is its IPv4 address there)."""
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    if any(candidate in network for candidate in (address, mapped) if candidate for network in allowed):
        return None
    if isinstance(address, ipaddress.IPv4Address):
        return _ipv4_refusal(address)
    embedded, form = _embedded(address)
    if embedded is not None:
        why = _ipv4_refusal(embedded)
        if why is not None:
            return f"{form} of {embedded}, {why}"
        if form != _COMPATIBLE:  # a global IPv4 address behind a form that reaches it
            return None
    return _ipv6_refusal(address)


def _ipv4_refusal(address: ipaddress.IPv4Address) -> str | None:
    if address == METADATA:
        return "the cloud metadata address (link-local)"
    for why, applies in (
        ("an unspecified address", address.is_unspecified),
        ("a loopback address", address.is_loopback),
        ("a link-local address", address.is_link_local),
        ("a private address", any(address in network for network in RFC1918)),
        ("a shared (carrier-grade NAT) address", address in SHARED),
        ("a multicast address", address.is_multicast),
        ("the broadcast address", address == BROADCAST),
        ("a reserved address", address.is_reserved),
        ("not a global address", not address.is_global),
    ):
        if applies:
            return why
    return None


def _ipv6_refusal(address: ipaddress.IPv6Address) -> str | None:
    for why, applies in (
        ("an unspecified address", address.is_unspecified),
        ("a loopback address", address.is_loopback),
        ("a link-local address", address.is_link_local),
        ("a private address", address in UNIQUE_LOCAL),
        ("a site-local address", address.is_site_local),
        ("a multicast address", address.is_multicast),
        ("a reserved address", address.is_reserved),
        ("not a global address", not address.is_global),
    ):
        if applies:
            return why
    return None


def _embedded(address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address | None, str]:
    """The IPv4 address an IPv6 address stands for, and the name of the form: IPv4-mapped, NAT64, 6to4, and the
    deprecated IPv4-compatible `::a.b.c.d` (`::` and `::1` are themselves)."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped, "an IPv4-mapped form"
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF), "a NAT64 form"
    if address.sixtofour is not None:
        return address.sixtofour, "a 6to4 form"
    if int(address) >> 32 == 0 and int(address) > 1:
        return ipaddress.IPv4Address(int(address)), _COMPATIBLE
    return None, ""
