"""``make cluster`` for real (ops/cluster/cluster.py): the reference cluster in network namespaces
starts, serves a scan through its load balancer (a held wait included), rides out its PostgreSQL
primary's host dying and its Redis master dying, and Ctrl-C leaves no namespace, process, address or
state behind. About 3 minutes on this machine; skipped without root or Debian's packages."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from simulator.procutil import wait_until

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "ops" / "cluster"))
import cluster  # noqa: E402 - ops/cluster/cluster.py, a script

LB = f"http://{cluster.addr('lb')}"


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "the cluster's network namespaces need root"
    missing = sorted({pkg for binary, pkg in cluster.PACKAGES.items() if shutil.which(binary) is None})
    if missing:
        return f"Debian's {' '.join(missing)} missing (apt-get install -y {' '.join(missing)})"
    if cluster.namespaces():
        return "a cluster is already up on this machine"
    return None


pytestmark = [pytest.mark.processes, pytest.mark.slow, pytest.mark.skipif(_why_not() is not None,
                                                                          reason=_why_not() or "")]


def left_behind() -> list[str]:
    left = [f"namespace {ns}" for ns in cluster.namespaces()]
    left += [line for line in subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout.splitlines()
             if f"{cluster.NET}." in line or cluster.BRIDGE in line]
    ps = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout.splitlines()
    left += [line for line in ps if str(cluster.STATE) + "/" in line]
    return left + ([str(cluster.STATE)] if cluster.STATE.exists() else [])


def kill_host(host: str) -> None:
    """Every process of ``host``'s namespace SIGKILLed: the host died."""
    for pid in subprocess.run(["ip", "netns", "pids", cluster.PREFIX + host], capture_output=True,
                              text=True).stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass


def scan(key: str, target: str) -> requests.Response:
    return requests.post(f"{LB}/api/v1/scan", json={"target": target}, timeout=35,
                         headers={"Authorization": f"Bearer {key}"})


def ride_out(key: str, what: str) -> dict:
    """Creations once a second until 5 in a row answer 202: each answer 202 or 503 JSON with
    Retry-After, within 30 s; returns the figures."""
    started, answers, in_a_row = time.monotonic(), [], 0
    while in_a_row < 5:
        assert time.monotonic() - started < 120, f"{what}: not served again within 120 s: {answers[-5:]}"
        t = time.monotonic()
        answer = scan(key, f"drill.{len(answers)}@example.com")
        seconds = time.monotonic() - t
        assert answer.status_code in (202, 503) and seconds < 30, (what, answer.status_code, answer.text[:200])
        if answer.status_code == 503:
            assert answer.json()["error"] == "service_unavailable" and int(answer.headers["Retry-After"]) >= 1
        answers.append(answer.status_code)
        in_a_row = in_a_row + 1 if answer.status_code == 202 else 0
        time.sleep(1)
    return {"answers": len(answers), "503": answers.count(503),
            "recovered_seconds": round(time.monotonic() - started, 1)}


def completed(key: str, scan_id: str) -> bool:
    read = requests.get(f"{LB}/api/v1/scan/{scan_id}?wait=20", timeout=35, headers={"Authorization": f"Bearer {key}"})
    return read.status_code == 200 and read.json()["status"] == "completed"


def primary_host() -> str:
    return cluster.primary()


def test_make_cluster_serves_rides_out_failovers_and_ctrl_c_leaves_nothing(tmp_path):
    log = open(tmp_path / "cluster.log", "wb")
    up = subprocess.Popen([sys.executable, str(ROOT / "ops" / "cluster" / "cluster.py"), "up"], cwd=ROOT,
                          stdout=log, stderr=subprocess.STDOUT)
    output = (tmp_path / "cluster.log").read_text
    try:
        wait_until(lambda: "demo key (shown once): " in output() or up.poll() is not None, 300, "the cluster")
        assert up.poll() is None, output()
        key = output().split("demo key (shown once): ")[1].split()[0]
        first = scan(key, "john.doe@example.com")
        assert first.status_code == 202, first.text
        assert completed(key, first.json()["scan_id"])  # through the held server (?wait=)

        kill_host(primary_host())  # PostgreSQL's primary host dies; Patroni promotes the standby
        pg = ride_out(key, "PostgreSQL failover")
        assert primary_host() is not None

        redis_pid = subprocess.run(["ip", "netns", "pids", cluster.PREFIX + "redis1"], capture_output=True,
                                   text=True).stdout.split()
        for pid in redis_pid:  # the master's redis-server only (its host's Sentinel stays)
            if "redis-server" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace"):
                os.kill(int(pid), signal.SIGKILL)
        redis = ride_out(key, "Redis failover")
        last = scan(key, "after.both@example.com")
        assert last.status_code == 202 and completed(key, last.json()["scan_id"])
        print("FIGURES", {"postgresql": pg, "redis": redis})
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGINT)  # Ctrl-C
        try:
            up.wait(90)
        except subprocess.TimeoutExpired:
            up.kill()
            subprocess.run([sys.executable, str(ROOT / "ops" / "cluster" / "cluster.py"), "down"], timeout=120)
            raise
        finally:
            log.close()
    assert up.returncode == 0, output()[-3000:]
    assert left_behind() == []
