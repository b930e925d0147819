"""Where the service's outbound requests may go (D11): the SSRF guard of webhook deliveries and of
the audit sinks' pushes (D32), below the domains that send them.

In production (``APP_ENV=production``) a webhook URL must be ``https`` and its host
must resolve only to public addresses: loopback, private, link-local (which holds
the cloud metadata address 169.254.169.254), shared (CGNAT), reserved, unspecified
and multicast ranges, and every block of IANA's special-purpose registries
(``app.plumbing.special_addresses``), are refused, also when hidden in an IPv4-mapped or 6to4 IPv6
address. Development and test deliver anywhere, as the receiver runs on localhost.

The check runs twice: when a URL is saved (``check_webhook_url``, a clear message
for the form) and at every connection (``guarded_session``). The second one is what
protects: the connection is made to the very address that was just checked, while
TLS (SNI, certificate) and the ``Host`` header keep the host name, so a DNS answer
that changes after the check (rebinding) cannot point the request elsewhere.

``AttemptDeadline`` bounds a whole attempt: requests' timeouts bound each socket read, so
a receiver dripping its answer a byte at a time would otherwise hold a worker for as long
as it likes (and be counted a success long after the timeout).
"""
from __future__ import annotations

import ipaddress
import re
import socket
import threading
from urllib.parse import urlsplit

import idna
import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError
from urllib3.util import connection as urllib3_connection

from app.plumbing import runtime
from app.plumbing.errors import AccountError
from app.plumbing.special_addresses import special_purpose


class UnsafeWebhookUrl(ValueError):
    """The URL may not receive webhooks: wrong scheme or a non-public address."""


def guard_enabled() -> bool:
    return runtime.config.get("APP_ENV") == "production"


def _unwrap(ip):
    """The IPv4 address an IPv6 one carries (mapped ``::ffff:a.b.c.d`` or 6to4), else ``ip``."""
    if ip.version == 6:
        return ip.ipv4_mapped or ip.sixtofour or ip
    return ip


def is_public(address: str) -> bool:
    ip = _unwrap(ipaddress.ip_address(address.split("%", maxsplit=1)[0]))
    # is_global alone lets multicast and some reserved IPv6 blocks (NAT64, ::/8) through, and it
    # lags IANA's registries (192.0.0.8): both registries are refused whole, from their data.
    return ip.is_global and not (ip.is_multicast or ip.is_reserved) and special_purpose(ip) is None


def resolve(host: str, port: int) -> list[str]:
    """The host's addresses in the resolver's order of preference; raises ``socket.gaierror``."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))  # an IP address, for TCP


def public_addresses(host: str, port: int) -> list[str]:
    """Resolve ``host`` and refuse it unless every address is public."""
    addresses = resolve(host, port)
    bad = [a for a in addresses if not is_public(a)]
    if bad:
        raise UnsafeWebhookUrl(f"{host} resolves to a non-public address ({', '.join(bad)})")
    return addresses


def check_scheme(url: str) -> None:
    """At send time: in production only ``https`` leaves the service."""
    if guard_enabled() and urlsplit(url).scheme != "https":
        raise UnsafeWebhookUrl("webhook URLs must use https")


_LABEL = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)")
_BRACKETED = re.compile(r"\[[^\[\]]+\](:[0-9]*)?")


def _host_and_port(parts) -> tuple[str, int | None]:
    """The URL's host (IDNA-encoded) and port; ``AccountError`` for anything malformed.

    ``urlsplit`` parses lazily: a bad port raises a bare ``ValueError`` only when
    ``.port`` is read, and it accepts hosts no HTTP client could connect to. Every
    such URL is refused here, when it is saved, with a message saying what is wrong.
    """
    try:
        port = parts.port
    except ValueError:
        raise AccountError("the webhook URL's port must be a number from 1 to 65535") from None
    if port == 0:
        raise AccountError("the webhook URL's port must be a number from 1 to 65535")
    host = parts.hostname or ""
    if not host:
        raise AccountError("the webhook URL has no host")
    if "[" in parts.netloc or "]" in parts.netloc:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise AccountError("the webhook URL's [bracketed] host must be an IPv6 address") from None
        if not _BRACKETED.fullmatch(parts.netloc):
            raise AccountError("the webhook URL has characters after its [IPv6] host")
        return host, port
    if not host.isascii():
        try:
            host = idna.encode(host, uts46=True).decode("ascii")
        except (idna.IDNAError, UnicodeError, ValueError):
            raise AccountError(f"the webhook URL's host {host!r} is not a valid host name") from None
    labels = host[:-1].split(".") if host.endswith(".") else host.split(".")
    if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise AccountError(f"the webhook URL's host {host!r} is not a valid host name")
    return host, port


def check_webhook_url(url: str, *, guard: bool | None = None) -> list[str]:
    """Raise ``AccountError`` unless ``url`` may receive webhooks; returns its addresses when guarded."""
    if len(url) > 2048:
        raise AccountError("the webhook URL is longer than 2048 characters")
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        # No URL holds these (RFC 3986); a NUL would not even fit in a PostgreSQL text column.
        raise AccountError("the webhook URL must not contain spaces or control characters")
    guard = guard_enabled() if guard is None else guard
    allowed = ("https",) if guard else ("http", "https")
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # an unclosed or invalid [IPv6] bracket
        raise AccountError(f"the webhook URL is malformed ({exc})") from None
    if parts.scheme not in allowed or not parts.netloc:
        raise AccountError(f"the webhook URL must be an absolute {' or '.join(allowed)} URL")
    if "@" in parts.netloc:
        raise AccountError("the webhook URL must not carry credentials")
    host, port = _host_and_port(parts)
    if not guard:
        return []
    try:
        return public_addresses(host, port or 443)
    except (OSError, UnicodeError) as exc:  # socket.gaierror is an OSError
        raise AccountError(f"the host {host!r} does not resolve") from exc
    except UnsafeWebhookUrl as exc:
        raise AccountError(f"the webhook URL is refused: {exc}") from exc


_attempt = threading.local()


class AttemptDeadline:
    """Ends an HTTP exchange ``seconds`` after it began, whatever the peer does.

    While it is active (``with``), every connection the guarded session opens in this
    thread is watched; when the time is up a timer shuts their sockets down, so a blocked
    read returns at once. ``fired`` tells the caller the exchange ran out of time. Call
    ``finish()`` before closing a response, so the timer never touches a closed socket.
    """

    def __init__(self, seconds: float):
        self.fired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._done = False
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def __enter__(self) -> AttemptDeadline:
        _attempt.deadline = self
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.finish()
        _attempt.deadline = None

    def watch(self, sock) -> None:
        with self._lock:
            if not self._done:
                self._sockets.append(sock)

    def finish(self) -> None:
        with self._lock:
            self._done = True
            self._timer.cancel()

    def _fire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.fired = True
            for sock in self._sockets:
                try:
                    # The plain socket's shutdown, also for an SSLSocket: it cuts the connection
                    # under the blocked read without tearing down the TLS object that read uses.
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)
                except OSError:
                    pass  # closed already


class WatchedConnectionMixin:
    """Hands each connected socket to the thread's running ``AttemptDeadline``, if any."""

    sock: socket.socket | None  # urllib3's connection attribute, which the classes below inherit

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]  # urllib3's HTTP(S)Connection, mixed in below
        deadline = getattr(_attempt, "deadline", None)
        if deadline is not None and self.sock is not None:
            deadline.watch(self.sock)


class WatchedHTTPConnection(WatchedConnectionMixin, HTTPConnection):
    pass


class WatchedHTTPSConnection(WatchedConnectionMixin, HTTPSConnection):
    pass


class PinnedHTTPSConnection(WatchedConnectionMixin, HTTPSConnection):
    """Connects only to addresses checked at this very moment; TLS still verifies the name.

    ``self.host`` stays the host name, so SNI, certificate verification and the
    ``Host`` header are unchanged; only the socket goes to the checked address.
    A refusal raises ``UnsafeWebhookUrl``, which urllib3 and requests let through.
    """

    def _new_conn(self) -> socket.socket:
        try:
            addresses = public_addresses(self.host, self.port)
        except socket.gaierror as exc:
            raise NewConnectionError(self, f"Failed to resolve {self.host}: {exc}") from exc
        error: OSError | None = None
        for address in addresses:
            try:
                return urllib3_connection.create_connection(
                    (address, self.port), self.timeout, source_address=self.source_address,
                    socket_options=self.socket_options)
            except TimeoutError as exc:
                raise ConnectTimeoutError(self, f"Connection to {self.host} timed out") from exc
            except OSError as exc:
                error = exc
        raise NewConnectionError(self, f"Failed to establish a new connection: {error}") from error


class PinnedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = PinnedHTTPSConnection


class WatchedHTTPPool(HTTPConnectionPool):
    ConnectionCls = WatchedHTTPConnection


class WatchedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = WatchedHTTPSConnection


class GuardedAdapter(HTTPAdapter):
    """A requests adapter whose connections an ``AttemptDeadline`` can cut; with ``pinned``
    (production), https pools use ``PinnedHTTPSConnection``."""

    def __init__(self, pinned: bool):
        self.pinned = pinned
        super().__init__()

    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {
            "http": WatchedHTTPPool, "https": PinnedHTTPSPool if self.pinned else WatchedHTTPSPool}


def guarded_session() -> requests.Session:
    """A session for one webhook attempt: no proxies from the environment (a proxy
    would resolve the name itself, past the guard), no default headers, connections an
    ``AttemptDeadline`` can cut, and in production the pinned connection for every https URL."""
    session = requests.Session()
    session.trust_env = False
    session.headers.clear()
    adapter = GuardedAdapter(pinned=guard_enabled())
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session
