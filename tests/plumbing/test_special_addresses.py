"""IANA's special-purpose address registries as data (app/plumbing/special_addresses.py): what
a webhook destination may never be, beyond what Python's ``ipaddress`` calls non-global."""
import ipaddress

import pytest

from app.plumbing.outbound_urls import is_public
from app.plumbing.special_addresses import IPV4_SPECIAL, IPV6_SPECIAL, special_purpose


def test_each_registry_entry_is_refused_at_both_ends():
    for block, name in IPV4_SPECIAL + IPV6_SPECIAL:
        network = ipaddress.ip_network(block)
        for address in (network[0], network[-1]):
            assert special_purpose(address) is not None, (block, name, address)
            assert is_public(str(address)) is False, (block, name, address)


@pytest.mark.parametrize(("address", "name"), [("192.0.0.8", "IETF protocol assignments"), ("100:0:0:1::1", "dummy IPv6 prefix")])
def test_an_address_is_named_by_its_block(address, name):
    assert name.casefold() in special_purpose(ipaddress.ip_address(address)).casefold()


@pytest.mark.parametrize("address", ["8.8.8.8", "192.0.1.1", "2a00:1450:4001:81c::200e"])
def test_an_address_outside_both_registries_has_no_name(address):
    assert special_purpose(ipaddress.ip_address(address)) is None
