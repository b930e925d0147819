"""CPU time by component (from /proc), to tell where a request's cost goes.

A snapshot sums user+system CPU seconds of the processes of each component:
the process groups the harness started (gunicorn API, baseline, simulator, workers),
and the machine's PostgreSQL and Redis servers by process name. Only reads /proc.
"""
from __future__ import annotations

import os
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def _processes():
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces: split after its end.
        comm = raw[raw.index("(") + 1:raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2:].split()
        pgrp = int(fields[2])
        cpu = (int(fields[11]) + int(fields[12])) / TICKS
        yield int(entry.name), comm, pgrp, cpu


def snapshot(groups: dict[str, int]) -> dict[str, float]:
    """CPU seconds so far of each named process group, plus ``postgres`` and ``redis``."""
    totals = dict.fromkeys(groups, 0.0)
    totals.update(postgres=0.0, redis=0.0)
    by_pgrp = {pgid: name for name, pgid in groups.items()}
    for _, comm, pgrp, cpu in _processes():
        if pgrp in by_pgrp:
            totals[by_pgrp[pgrp]] += cpu
        elif comm == "postgres" or comm.startswith("postgres:"):
            totals["postgres"] += cpu
        elif comm.startswith("redis-server"):
            totals["redis"] += cpu
    return totals


def machine_busy() -> float:
    """CPU seconds so far of the whole machine, every process's (idle and iowait excluded): what
    the named groups leave of it is the load generator's helpers and other users' work."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(values) - values[3] - values[4]) / TICKS


def _cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class DatabaseBackends:
    """CPU seconds of the PostgreSQL backends connected to one database, the others' apart.

    On a machine shared with other PostgreSQL clients, ``snapshot``'s ``postgres`` counts their
    statements too. A backend's process title names its database (``postgres: 15/main: USER DB
    HOST(PORT) ...``); a backend that exits takes its CPU with it, so each one's last figure is
    kept and the total only grows. The server's own processes (WAL writer, checkpointer,
    autovacuum) are not counted.
    """

    def __init__(self, database: str):
        self.marker = f" {database} "
        self.seen: dict[int, float] = {}
        self.others: set[int] = set()

    def total(self) -> float:
        for pid, comm, _, cpu in _processes():
            if not (comm == "postgres" or comm.startswith("postgres:")) or pid in self.others:
                continue
            if pid not in self.seen and self.marker not in _cmdline(pid):
                self.others.add(pid)  # another database's (pids are not reused within a run)
                continue
            self.seen[pid] = cpu
        return sum(self.seen.values())


def delta(before: dict, after: dict) -> dict:
    return {name: round(after.get(name, 0.0) - before.get(name, 0.0), 2) for name in after}
