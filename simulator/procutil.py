"""Two helpers for whatever starts local processes and waits on them: the scenario
stack, the benchmark and the tests that run real servers. One copy, here, since the
simulator is the one package all three already import."""
from __future__ import annotations

import socket
import time

import requests


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def wait_until(check, timeout: float, what: str, interval: float = 0.1):
    """Call ``check`` until it returns something true (returned), for at most ``timeout``
    seconds; a connection refused or an HTTP error counts as not yet. Separate processes
    run on wall-clock time, so this sleeps: there is no clock to freeze."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except (requests.RequestException, OSError) as exc:
            last = exc
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}" + (f" ({last})" if last else ""))
