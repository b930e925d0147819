"""A host the test can cut off the network without a word: a network namespace joined to this one
by a veth pair, addressed in 198.18.0.0/15 (the benchmarking range, nothing outside this machine),
with ``socat`` inside forwarding a TCP port to a server of this machine. ``cut()`` takes the link
down: packets to it vanish, no reset, no refusal, as when a host drops off the network; ``close()``
removes the namespace, its link and its processes. Needs root, ``ip`` and ``socat``."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from simulator.procutil import wait_until


def available() -> str | None:
    """Why these tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    missing = [tool for tool in ("ip", "socat") if shutil.which(tool) is None]
    return f"missing {', '.join(missing)} (Debian's iproute2, socat)" if missing else None


def _ip(*args: str, ns: str | None = None) -> None:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    subprocess.run(cmd, check=True, capture_output=True, timeout=20)


class IsolatedHost:
    PORT = 5432

    def __init__(self, upstream: tuple[str, int] | str):
        """``upstream``: where the forwarded port leads (a host and port of this namespace, or a unix socket)."""
        n = os.getpid() % 200 + 20  # one /30 per test process: 198.19.<n>.0/30
        self.ns, self.outer, self.inner = f"scanapi-cut{os.getpid()}", f"sc{os.getpid()}a", f"sc{os.getpid()}b"
        self.host_address, self.address = f"198.19.{n}.1", f"198.19.{n}.2"
        self._procs: list[subprocess.Popen] = []
        self._dir = Path(tempfile.mkdtemp(prefix="scanapi-cut-"))
        try:
            _ip("ip", "netns", "add", self.ns)
            _ip("ip", "link", "add", self.outer, "type", "veth", "peer", "name", self.inner)
            _ip("ip", "link", "set", self.inner, "netns", self.ns)
            _ip("ip", "addr", "add", f"{self.host_address}/30", "dev", self.outer)
            _ip("ip", "link", "set", self.outer, "up")
            _ip("ip", "addr", "add", f"{self.address}/30", "dev", self.inner, ns=self.ns)
            _ip("ip", "link", "set", self.inner, "up", ns=self.ns)
            if isinstance(upstream, str):
                target = f"UNIX-CONNECT:{upstream}"
            else:  # a TCP server of this namespace's loopback: reached through a unix socket (files cross namespaces)
                relay = self._dir / "relay.sock"
                self._spawn(["socat", f"UNIX-LISTEN:{relay},fork", f"TCP:{upstream[0]}:{upstream[1]}"])
                wait_until(relay.exists, 10, "the relay's socket")
                target = f"UNIX-CONNECT:{relay}"
            self._spawn(["ip", "netns", "exec", self.ns, "socat",
                         f"TCP-LISTEN:{self.PORT},bind={self.address},reuseaddr,fork", target])
            wait_until(self._answers, 10, f"the forwarder on {self.address}:{self.PORT}")
        except BaseException:
            self.close()
            raise

    def _spawn(self, cmd: list[str]) -> None:
        self._procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                            start_new_session=True))

    def _answers(self) -> bool:
        import socket
        with socket.create_connection((self.address, self.PORT), timeout=1):
            return True

    def cut(self) -> None:
        """The host drops off the network: its end of the link goes down, nothing answers any more."""
        _ip("ip", "link", "set", self.inner, "down", ns=self.ns)

    def close(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        subprocess.run(["ip", "link", "del", self.outer], capture_output=True, timeout=20)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True, timeout=20)
        shutil.rmtree(self._dir, ignore_errors=True)
