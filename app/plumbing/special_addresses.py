"""IANA's special-purpose address registries, as data: the blocks no webhook may be sent to.

Sources (every entry of each, as published; checked 2025):
- IPv4: https://www.iana.org/assignments/iana-ipv4-special-registry/iana-ipv4-special-registry.xhtml
- IPv6: https://www.iana.org/assignments/iana-ipv6-special-registry/iana-ipv6-special-registry.xhtml

Every entry is refused, those IANA marks "globally reachable" included (anycast relays, AS112,
translation prefixes): no customer's receiver lives there, and Python's ``ipaddress`` lags the
registries (``is_global`` calls 192.0.0.8, the IPv4 dummy address, global). A new entry of a
registry is one line here. IPv4-mapped (``::ffff:0:0/96``) and 6to4 (``2002::/16``) addresses are
judged by the IPv4 address they carry (``webhook_urls._unwrap``), so they are not listed.
"""
from __future__ import annotations

import ipaddress

# (block, the registry's name for it)
IPV4_SPECIAL = (
    ("0.0.0.0/8", "this network"),
    ("10.0.0.0/8", "private use"),
    ("100.64.0.0/10", "shared address space"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link local"),
    ("172.16.0.0/12", "private use"),
    ("192.0.0.0/24", "IETF protocol assignments"),  # holds 192.0.0.0/29, .8, .9, .10, .170, .171
    ("192.0.2.0/24", "documentation (TEST-NET-1)"),
    ("192.31.196.0/24", "AS112-v4"),
    ("192.52.193.0/24", "AMT"),
    ("192.88.99.0/24", "deprecated 6to4 relay anycast"),
    ("192.168.0.0/16", "private use"),
    ("192.175.48.0/24", "direct delegation AS112 service"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation (TEST-NET-2)"),
    ("203.0.113.0/24", "documentation (TEST-NET-3)"),
    ("240.0.0.0/4", "reserved"),
    ("255.255.255.255/32", "limited broadcast"),
)
IPV6_SPECIAL = (
    ("::1/128", "loopback"),
    ("::/128", "unspecified"),
    ("64:ff9b::/96", "IPv4-IPv6 translation"),
    ("64:ff9b:1::/48", "local-use IPv4/IPv6 translation"),
    ("100::/64", "discard-only"),
    ("100:0:0:1::/64", "dummy IPv6 prefix"),
    ("2001::/23", "IETF protocol assignments"),  # holds TEREDO, PCP/TURN/DNS-SD anycast, AMT, AS112, ORCHIDv2
    ("2001:db8::/32", "documentation"),
    ("2620:4f:8000::/48", "direct delegation AS112 service"),
    ("3fff::/20", "documentation"),
    ("5f00::/16", "segment routing (SRv6) SIDs"),
    ("fc00::/7", "unique-local"),
    ("fe80::/10", "link-local unicast"),
)

_NETWORKS = tuple((ipaddress.ip_network(block), name) for block, name in IPV4_SPECIAL + IPV6_SPECIAL)


def special_purpose(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """The registry's name of the block ``ip`` is in, or None for an address outside both registries."""
    return next((name for network, name in _NETWORKS if network.version == ip.version and ip in network), None)
