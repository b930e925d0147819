"""Drive one target with wrk and read its figures.

Every run loads ``lua/common.lua`` (status counting and the ``BENCH_*`` lines) and
then the target's script, with the same threads, connections and duration for every
target. The raw output is kept as it came.
"""
from __future__ import annotations

import json
import re
import resource
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.stack import local_only

LUA = Path(__file__).resolve().parent / "lua"


@dataclass
class WrkResult:
    name: str
    url: str
    connections: int
    threads: int
    duration_s: float
    requests: int = 0
    rps: float = 0.0
    p50_ms: float = 0.0
    p90_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0
    mean_ms: float = 0.0
    statuses: dict = field(default_factory=dict)
    non_2xx: int = 0
    socket_errors: dict = field(default_factory=dict)
    cpu_s: dict = field(default_factory=dict)
    cpu_ms_per_request: dict = field(default_factory=dict)
    raw: str = ""

    def as_dict(self) -> dict:
        data = asdict(self)
        data.pop("raw")
        return data


def wrk_available() -> bool:
    return shutil.which("wrk") is not None


def combined_script(name: str, script: str, workdir: Path) -> Path:
    """``lua/common.lua`` (status counting, the ``BENCH_*`` lines) followed by ``script``, as wrk loads it."""
    combined = workdir / f"{name}.lua"
    combined.write_text((LUA / "common.lua").read_text() + "\n" + (LUA / script).read_text())
    return combined


def run(name: str, url: str, script: str, args: list[str], *, connections: int, threads: int, duration: float,
        workdir: Path, timeout_s: float = 10.0) -> WrkResult:
    local_only(url)
    combined = combined_script(name, script, workdir)
    cmd = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration:g}s", f"--timeout={timeout_s:g}s",
           "--latency", "-s", str(combined), url]
    if args:
        cmd += ["--", *args]
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + timeout_s + 60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    wrk_cpu = (after.ru_utime - children.ru_utime) + (after.ru_stime - children.ru_stime)
    raw = out.stdout + (("\n[stderr]\n" + out.stderr) if out.stderr.strip() else "")
    if out.returncode != 0:
        raise RuntimeError(f"wrk failed for {name}: {raw[-2000:]}")
    result = parse(name, url, connections, threads, duration, raw)
    result.cpu_s["wrk"] = round(wrk_cpu, 2)
    return result


def parse(name, url, connections, threads, duration, raw: str) -> WrkResult:
    result = WrkResult(name=name, url=url, connections=connections, threads=threads, duration_s=duration, raw=raw)
    status = re.search(r"^BENCH_STATUS (\{.*\})$", raw, re.MULTILINE)
    latency = re.search(r"^BENCH_LATENCY_US (.*)$", raw, re.MULTILINE)
    summary = re.search(r"^BENCH_SUMMARY (.*)$", raw, re.MULTILINE)
    if not (status and latency and summary):
        raise RuntimeError(f"wrk output for {name} lacks the BENCH_ lines:\n{raw[-2000:]}")
    lat = {k: float(v) for k, v in (p.split("=") for p in latency.group(1).split())}
    summ = {k: int(v) for k, v in (p.split("=") for p in summary.group(1).split())}
    result.statuses = {int(k): v for k, v in json.loads(status.group(1)).items()}
    result.requests = summ["requests"]
    result.rps = summ["requests"] / (summ["duration_us"] / 1e6) if summ["duration_us"] else 0.0
    result.p50_ms, result.p90_ms, result.p99_ms = lat["p50"] / 1000, lat["p90"] / 1000, lat["p99"] / 1000
    result.max_ms, result.mean_ms = lat["max"] / 1000, lat["mean"] / 1000
    result.non_2xx = sum(n for code, n in result.statuses.items() if not 200 <= code < 300)
    result.socket_errors = {k: summ[k] for k in ("connect", "read", "write", "timeout") if summ[k]}
    return result
