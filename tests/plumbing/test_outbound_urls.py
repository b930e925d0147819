"""The SSRF guard of webhook URLs (D11): which addresses are public, the check when a
URL is saved, and the check at every connection, pinned to the address it checked.

There is no DNS here: ``dns`` replaces ``socket.getaddrinfo`` for made-up host names
(answering in turn, the last answer repeated) and leaves IP literals to the real one.
"""
from __future__ import annotations

import socket

import pytest
import requests
import urllib3.util.connection

from app.plumbing import runtime
from app.plumbing.errors import AccountError
from app.plumbing.outbound_urls import UnsafeWebhookUrl, check_webhook_url, guarded_session, is_public
from app.webhooks import outbox
from app.webhooks.models import DeliveryAttempt

HOST = "hooks.customer.example"
URL = f"https://{HOST}/webhook"
PUBLIC, PUBLIC_V6 = "93.184.216.34", "2606:4700::1111"

REFUSED = {
    "loopback": "127.0.0.1",
    "loopback, far end": "127.255.255.254",
    "RFC 1918 10/8": "10.0.0.7",
    "RFC 1918 172.16/12": "172.31.255.1",
    "RFC 1918 192.168/16": "192.168.1.1",
    "link-local": "169.254.10.20",
    "cloud metadata": "169.254.169.254",
    "CGNAT 100.64/10": "100.64.0.1",
    "this network 0/8": "0.1.2.3",
    "unspecified": "0.0.0.0",
    "benchmarking 198.18/15": "198.18.0.1",
    "documentation": "192.0.2.10",
    "IPv4 multicast": "224.0.0.251",
    "reserved 240/4": "240.0.0.1",
    "broadcast": "255.255.255.255",
    "IPv6 loopback": "::1",
    "IPv6 unspecified": "::",
    "IPv6 unique local fc00::/7": "fd12:3456::1",
    "IPv6 link-local fe80::/10": "fe80::1",
    "IPv6 link-local with zone": "fe80::1%eth0",
    "IPv6 multicast": "ff02::1",
    "IPv4-mapped loopback": "::ffff:127.0.0.1",
    "IPv4-mapped metadata": "::ffff:169.254.169.254",
    "6to4 of loopback": "2002:7f00:1::1",
    "NAT64 of private": "64:ff9b::a00:1",
    "IPv4-compatible loopback": "::127.0.0.1",
}


class FakeDns:
    def __init__(self):
        self.answers: dict[str, list[list[str]]] = {}
        self.lookups: list[str] = []

    def answer(self, host: str, *answers: list[str]) -> None:
        self.answers[host] = list(answers)

    def getaddrinfo(self, real, host, port, *args, **kwargs):
        if host not in self.answers:
            return real(host, port, *args, **kwargs)
        self.lookups.append(host)
        queue = self.answers[host]
        addresses = queue.pop(0) if len(queue) > 1 else queue[0]
        return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "",
                 (a, port, 0, 0) if ":" in a else (a, port)) for a in addresses]


@pytest.fixture
def dns(monkeypatch):
    fake, real = FakeDns(), socket.getaddrinfo
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **kw: fake.getaddrinfo(real, *a, **kw))
    return fake


@pytest.fixture
def connections(monkeypatch):
    """Records where sockets would go, and refuses them (there is no network here)."""
    made = []

    def refuse(address, *args, **kwargs):
        made.append(address)
        raise ConnectionRefusedError(111, "Connection refused")
    monkeypatch.setattr(urllib3.util.connection, "create_connection", refuse)
    return made


# --- which addresses are public -------------------------------------------------------------


@pytest.mark.parametrize("address", list(REFUSED.values()), ids=list(REFUSED))
def test_non_public_addresses_are_refused(address):
    assert is_public(address) is False


# Addresses of IANA's special-purpose registries that Python's ``ipaddress`` calls global (some of
# them IANA marks globally reachable too): none is a customer's receiver.
IANA_ONLY = {"IPv4 dummy address": "192.0.0.8", "PCP anycast": "192.0.0.9", "TURN anycast": "192.0.0.10",
             "AS112-v4": "192.31.196.1", "AMT": "192.52.193.1", "AS112 direct delegation": "192.175.48.1",
             "6to4 relay anycast": "192.88.99.1", "local-use translation": "64:ff9b:1::1",
             "dummy IPv6 prefix": "100:0:0:1::1", "IPv6 PCP anycast": "2001:1::1", "AS112-v6": "2001:4:112::1",
             "ORCHIDv2": "2001:20::1", "drone DETs": "2001:30::1", "AS112-v6 direct delegation": "2620:4f:8000::1",
             "IPv6 documentation 3fff::/20": "3fff::1", "SRv6 SIDs": "5f00::1", "NAT64 of public": "64:ff9b::808:808"}


@pytest.mark.parametrize("address", list(IANA_ONLY.values()), ids=list(IANA_ONLY))
def test_every_block_of_ianas_special_purpose_registries_is_refused(address):
    assert is_public(address) is False


@pytest.mark.parametrize("address", [PUBLIC, "8.8.8.8", "1.1.1.1", PUBLIC_V6, "2a00:1450:4001:81c::200e",
                                     "192.0.1.1", "2001:200::1", "::ffff:8.8.8.8"])
def test_public_addresses_are_allowed(address):
    assert is_public(address) is True


# --- when a URL is saved --------------------------------------------------------------------


@pytest.mark.config(APP_ENV="production")
@pytest.mark.parametrize("address", list(REFUSED.values()), ids=list(REFUSED))
def test_saving_a_url_that_resolves_to_a_non_public_address_is_refused(app, dns, address):
    dns.answer(HOST, [PUBLIC, address])
    with pytest.raises(AccountError, match="non-public"):
        check_webhook_url(URL)


@pytest.mark.config(APP_ENV="production")
@pytest.mark.parametrize("url, message", [
    (f"http://{HOST}/webhook", "https"),
    ("https://127.0.0.1/webhook", "non-public"),
    ("https://[::1]/webhook", "non-public"),
    ("https://169.254.169.254/latest/meta-data", "non-public"),
    (f"https://user:pw@{HOST}/webhook", "credentials"),
    ("https://does-not-resolve.invalid/webhook", "does not resolve"),
])
def test_saving_other_unsafe_urls_is_refused(app, dns, url, message):
    dns.answer(HOST, [PUBLIC])
    with pytest.raises(AccountError, match=message):
        check_webhook_url(url)


@pytest.mark.config(APP_ENV="production")
def test_saving_a_public_https_url_is_accepted(app, dns):
    dns.answer(HOST, [PUBLIC, PUBLIC_V6])
    assert check_webhook_url(URL) == [PUBLIC, PUBLIC_V6]


def test_development_and_test_accept_local_http(app):
    assert check_webhook_url("http://127.0.0.1:8700/_sim/hooks/x") == []


# --- at connection time ---------------------------------------------------------------------


@pytest.mark.config(APP_ENV="production")
@pytest.mark.parametrize("address", list(REFUSED.values()), ids=list(REFUSED))
def test_a_connection_to_a_non_public_address_is_refused_before_any_socket(app, dns, connections, address):
    dns.answer(HOST, [address])
    with guarded_session() as session, pytest.raises(UnsafeWebhookUrl):
        session.post(URL, data=b"{}", timeout=2)
    assert connections == []


@pytest.mark.config(APP_ENV="production")
def test_dns_rebinding_after_the_save_check_is_refused_at_connect(app, dns, connections):
    dns.answer(HOST, [PUBLIC], ["10.0.0.7"])
    assert check_webhook_url(URL) == [PUBLIC]
    with guarded_session() as session, pytest.raises(UnsafeWebhookUrl, match=r"10\.0\.0\.7"):
        session.post(URL, data=b"{}", timeout=2)
    assert connections == []


@pytest.mark.config(APP_ENV="production")
def test_the_socket_goes_to_the_address_just_checked(app, dns, connections):
    # The name is resolved once per connection; a second, different answer is never used.
    dns.answer(HOST, [PUBLIC, PUBLIC_V6], ["10.0.0.7"])
    with guarded_session() as session, pytest.raises(requests.ConnectionError):
        session.post(URL, data=b"{}", timeout=2)
    assert dns.lookups == [HOST]
    assert connections == [(PUBLIC, 443), (PUBLIC_V6, 443)]


@pytest.mark.config(APP_ENV="production")
def test_the_session_ignores_proxies_from_the_environment(app, monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    assert guarded_session().trust_env is False


# --- through the delivery worker ------------------------------------------------------------


@pytest.mark.config(APP_ENV="production", WEBHOOK_RETRY_SCHEDULE=())
def test_a_delivery_to_a_rebound_host_is_logged_as_ssrf_refused(app, dns, connections, make_customer, jobs):
    dns.answer(HOST, [PUBLIC], ["169.254.169.254"])
    account = make_customer(webhook_url=URL, webhook_secret="whsec_MDEyMzQ1Njc4OWFiY2RlZg==")
    delivery = outbox.send_test_event(account.key.id, account.customer.id)
    jobs.run()
    [attempt] = DeliveryAttempt.select().where(DeliveryAttempt.delivery == delivery.id)
    assert (attempt.outcome, attempt.error, attempt.status_code) == ("failed", "ssrf_refused", None)
    assert connections == []


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=())
def test_a_plain_http_url_left_from_before_is_refused_at_send_time(
        app, connections, make_customer, jobs, simulator, monkeypatch):
    # Saved in development (no guard), sent after the service moved to production.
    account = make_customer(webhook_url=f"{simulator.url}/_sim/hooks/never", webhook_secret="whsec_MDEyMzQ1Njc4OWFiY2RlZg==")
    delivery = outbox.send_test_event(account.key.id, account.customer.id)
    monkeypatch.setitem(runtime.config, "APP_ENV", "production")
    jobs.run()
    [attempt] = DeliveryAttempt.select().where(DeliveryAttempt.delivery == delivery.id)
    assert attempt.error == "ssrf_refused" and connections == []


# --- malformed URLs: the save check's own message, never urllib's ValueError ------------------

NASTY_URLS = {
    "port out of range": "https://127.0.0.1:99999/",
    "port not a number": "https://93.184.216.34:abc/",
    "port zero": "https://93.184.216.34:0/",
    "negative port": "https://93.184.216.34:-1/",
    "port with a sign": "https://93.184.216.34:+443/",
    "host then two colons": "https://::1/",
    "unclosed IPv6 bracket": "https://[::1/",
    "stray closing bracket": "https://a]b/",
    "bracketed non-address": "https://[zz]/",
    "bracketed IPvFuture": "https://[v1.x]/",
    "junk after the bracket": "https://[::1]x/",
    "bracketed IPv4": "https://[127.0.0.1]/",
    "empty label": "https://a..b/",
    "label too long": f"https://{'a' * 64}.example/",
    "name too long": "https://" + ".".join(["abcdefghi"] * 26) + "/",
    "leading hyphen": "https://-hooks.example/",
    "percent in host": "https://%7f.example/",
    "bad punycode": "https://xn--/",
    "unencodable unicode": "https://\u2603\u2603.example/",
    "no host": "https:///webhook",
    "only a port": "https://:443/",
    "empty credentials": "https://@hooks.example/",
    "no scheme": "//hooks.example/x",
    "relative": "/webhook",
    "javascript": "javascript:alert(1)",
    "data": "data:text/plain,x",
}


@pytest.mark.parametrize("guard", [False, True], ids=["development", "production"])
@pytest.mark.parametrize("url", list(NASTY_URLS.values()), ids=list(NASTY_URLS))
def test_every_malformed_url_gets_a_clear_refusal(app, url, guard):
    with pytest.raises(AccountError) as refused:
        check_webhook_url(url, guard=guard)
    assert type(refused.value) is AccountError and "webhook URL" in str(refused.value)


@pytest.mark.parametrize("url", ["http://127.0.0.1:8700/_sim/hooks/x", "http://localhost/x", "http://[::1]:9/x",
                                 "https://hooks.example.com:443/x?y=1#z", "http://receiver_1:8080/x",
                                 "https://b\u00fccher.example/hook", "https://hooks.example.com./x"])
def test_well_formed_urls_still_pass_in_development(app, url):
    assert check_webhook_url(url, guard=False) == []


@pytest.mark.config(APP_ENV="production")
def test_an_international_host_is_resolved_by_its_ascii_name(app, dns):
    dns.answer("xn--bcher-kva.example", [PUBLIC])
    assert check_webhook_url("https://b\u00fccher.example/hook") == [PUBLIC]
