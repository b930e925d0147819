"""The machine description and the summary (``summary.json``, ``summary.md``) of a run."""
from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path

from bench.stack import PG_ADMIN_DSN, REDIS_DB, ROOT

# The floor of each endpoint: the thinnest code doing the same durable work (bench/floor_app.py).
FLOOR_OF = {"read": "floor_read", "read_many": "floor_read", "read_queued": "floor_read",
            "bulk_read": "floor_bulk_read", "create": "floor_create", "create_many": "floor_create",
            "bulk_create": "floor_bulk_create", "floor_read_observed": "floor_read"}

GOALS = {
    "read_floor_ratio": (">=", 0.9, "GET /scan/{id} RPS >= 0.9 of its floor (1 customer)"),
    "read_many_floor_ratio": (">=", 0.9, "GET /scan/{id} RPS >= 0.9 of its floor (N customers)"),
    "create_floor_ratio": (">=", 0.9, "POST /scan RPS >= 0.9 of its floor (1 customer)"),
    "create_many_floor_ratio": (">=", 0.9, "POST /scan RPS >= 0.9 of its floor (N customers)"),
    "bulk_p50_ratio": ("<=", 4.0, "POST /scan/bulk (100) p50 <= 4x POST /scan p50"),
    "bulk_read_p50_ratio": ("<=", 1.5, "GET /scan/bulk/{id} (100) p50 <= 1.5x GET /scan/{id} p50"),
    "read_p99_p50": ("<=", 3.0, "GET /scan/{id} under load: p99 <= 3x p50"),
    "engine_over_create": (">=", 3.0, "engine stand-in alone >= 3x the POST /scan RPS"),
    "webhook_p95_ms": ("<", 1000.0, "webhook received < 1 s after the engine is done (p95)"),
    "deliveries_per_s_200ms": (">=", 200.0, "one worker: deliveries/s with receivers answering in 200 ms"),
    "fast_beside_hanging_p95_ms": ("<", 1000.0, "fast receivers beside a hanging one: created-to-received p95"),
    "endpoints_one_host_p95_ratio": ("<=", 2.0, "1,000 endpoints on one host, one hanging: the others' p95 "
                                                "<= 2x a single endpoint's"),
}

CPU_COLUMNS = ("api", "floor", "floor_observed", "baseline", "postgres", "redis", "engine", "simulator", "wrk")

LABELS = {
    "baseline": "baseline: bare Flask `GET /json`",
    "floor_read": "floor: read",
    "floor_read_observed": "floor: read, with the service's request log line and metrics",
    "read": "`GET /api/v1/scan/{id}` (completed, 1 customer)",
    "read_many": "`GET /api/v1/scan/{id}` (completed, N customers)",
    "read_queued": "`GET /api/v1/scan/{id}` (queued, 1 customer)",
    "floor_bulk_read": "floor: aggregate read of 100",
    "bulk_read": "`GET /api/v1/scan/bulk/{id}` (100 completed)",
    "floor_create": "floor: creation",
    "create": "`POST /api/v1/scan` (1 customer)",
    "create_many": "`POST /api/v1/scan` (N customers)",
    "floor_bulk_create": "floor: bulk creation of 100",
    "bulk_create": "`POST /api/v1/scan/bulk` (100 targets)",
    "engine": "engine stand-in alone: `POST /v1/investigations`",
    "baseline_end": "baseline again, at the end",
}


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def machine(stack) -> dict:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from importlib.metadata import version
    packages = {name: version(name) for name in ("flask", "gunicorn", "rq", "redis", "peewee", "psycopg2-binary",
                                                 "marshmallow", "flask-smorest", "requests")}
    info = stack.redis().info("server")
    return {
        "nproc": _run(["nproc"]), "cpu_model": cpu, "free_h": _run(["free", "-h"]),
        "kernel": platform.release(), "python": platform.python_version(),
        "postgresql": stack.sql("SHOW server_version", dsn=PG_ADMIN_DSN)[0][0], "redis": info.get("redis_version"),
        "wrk": _run(["wrk", "--version"]).splitlines()[0] if _run(["wrk", "--version"]) else "?",
        "packages": packages,
        "git_head": _run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]),
        "git_dirty_files": len([l for l in _run(["git", "-C", str(ROOT), "status", "--porcelain"]).splitlines() if l]),
    }


def load_average() -> dict:
    one, five, fifteen = os.getloadavg()
    return {"uptime": _run(["uptime"]), "load1": one, "load5": five, "load15": fifteen}


def ratios(http: dict) -> dict:
    out = {}
    for label in ("loaded", "single"):
        figures = http.get(label) or {}
        base = figures.get("baseline")
        r = {}
        for name, floor in FLOOR_OF.items():
            if name not in figures:
                continue
            if base and base["rps"]:
                r[f"{name}_rps_ratio"] = round(figures[name]["rps"] / base["rps"], 3)
            if floor in figures and figures[floor]["rps"]:
                r[f"{name}_floor_ratio"] = round(figures[name]["rps"] / figures[floor]["rps"], 3)
                r[f"{name}_floor_p50_ratio"] = round(figures[name]["p50_ms"] / figures[floor]["p50_ms"], 2)
        for floor in set(FLOOR_OF.values()):
            if floor in figures and base and base["rps"]:
                r[f"{floor}_rps_ratio"] = round(figures[floor]["rps"] / base["rps"], 3)
        if "bulk_create" in figures and "create" in figures and figures["create"]["p50_ms"]:
            r["bulk_p50_ratio"] = round(figures["bulk_create"]["p50_ms"] / figures["create"]["p50_ms"], 2)
        if "bulk_read" in figures and "read" in figures and figures["read"]["p50_ms"]:
            r["bulk_read_p50_ratio"] = round(figures["bulk_read"]["p50_ms"] / figures["read"]["p50_ms"], 2)
        if "read" in figures and figures["read"]["p50_ms"]:
            r["read_p99_p50"] = round(figures["read"]["p99_ms"] / figures["read"]["p50_ms"], 2)
        if "engine" in figures and "create" in figures and figures["create"]["rps"]:
            r["engine_over_create"] = round(figures["engine"]["rps"] / figures["create"]["rps"], 1)
        if r:
            out[label] = r
    return out


def goals(summary: dict) -> list[dict]:
    loaded = summary.get("ratios", {}).get("loaded", {})
    values = {key: loaded.get(key) for key in GOALS}
    values["webhook_p95_ms"] = (summary.get("latency") or {}).get("engine_done_to_received_ms", {}).get("p95")
    webhooks = summary.get("webhooks") or {}
    values["deliveries_per_s_200ms"] = next(
        (t["per_second"] for t in webhooks.get("throughput", []) if t["delay_ms"] == 200), None)
    steady = webhooks.get("isolation_steady") or {}
    values["fast_beside_hanging_p95_ms"] = steady["p95_s"] * 1000 if steady.get("p95_s") is not None else None
    values["endpoints_one_host_p95_ratio"] = (webhooks.get("endpoints_one_host") or {}).get("p95_ratio")
    rows = []
    for key, (op, target, text) in GOALS.items():
        value = values[key]
        met = None if value is None else (value >= target if op == ">=" else value <= target if op == "<="
                                          else value < target)
        rows.append({"key": key, "goal": text, "value": value, "target": f"{op} {target:g}", "met": met})
    return rows


def markdown(summary: dict) -> str:
    m, lines = summary["machine"], []
    lines += [f"# Benchmark run {summary['run']}", "",
              f"Machine: {m['nproc']} CPUs ({m['cpu_model']}), Python {m['python']}, PostgreSQL {m['postgresql']}, "
              f"Redis {m['redis']}, {m['wrk']}; git {m['git_head']} (+{m['git_dirty_files']} changed files).",
              f"Load before: {summary['load_before']['uptime']}", f"Load after: {summary['load_after']['uptime']}",
              f"Settings: {json.dumps(summary['settings'])}", ""]
    http = summary.get("http")
    if http:
        for label, title in (("loaded", "Under load"), ("single", "One connection (unloaded latency)")):
            figures = http.get(label) or {}
            if not figures:
                continue
            base = figures.get("baseline", {}).get("rps") or 0
            first = next(iter(figures.values()))
            lines += [f"## HTTP: {title} ({first['connections']} connections, {first['threads']} wrk threads, "
                      f"{first['duration_s']:g} s each; N = {http.get('customers_many')})", "",
                      "| Target | RPS | p50 ms | p99 ms | RPS / baseline | RPS / floor | p50 / floor p50 | non-2xx "
                      "| socket errors |",
                      "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
            for name, f in figures.items():
                ratio = f"{f['rps'] / base:.2f}" if base else "-"
                floor = figures.get(FLOOR_OF.get(name, ""))
                to_floor = f"{f['rps'] / floor['rps']:.2f}" if floor and floor["rps"] else "-"
                p50_floor = f"{f['p50_ms'] / floor['p50_ms']:.2f}" if floor and floor["p50_ms"] else "-"
                errors = sum(f["socket_errors"].values()) if f["socket_errors"] else 0
                lines.append(f"| {LABELS.get(name, name)} | {f['rps']:.1f} | {f['p50_ms']:.2f} | {f['p99_ms']:.2f} | "
                             f"{ratio} | {to_floor} | {p50_floor} | {f['non_2xx']} | {errors} |")
            lines += ["", "CPU milliseconds per request, by component (all processes of the machine's PostgreSQL "
                      "and Redis servers count):", "",
                      "| Target | " + " | ".join(CPU_COLUMNS) + " |", "|---|" + "---:|" * len(CPU_COLUMNS)]
            for name, f in figures.items():
                per = f.get("cpu_ms_per_request", {})
                lines.append(f"| {LABELS.get(name, name)} | " + " | ".join(f"{per.get(c, 0):.3f}" for c in CPU_COLUMNS)
                             + " |")
            r = summary["ratios"].get(label, {})
            lines += ["", f"Bulk of 100 p50 / single creation p50: **{r.get('bulk_p50_ratio')}**; "
                          f"aggregate read of 100 p50 / single read p50: **{r.get('bulk_read_p50_ratio')}**; "
                          f"read p99 / p50: **{r.get('read_p99_p50')}**; engine stand-in RPS / creation RPS: "
                          f"**{r.get('engine_over_create')}**", ""]
        queries = http.get("queries") or {}
        if queries and "error" not in queries:
            lines += ["## Per request", "",
                      "| Request | SQL statements | by kind | Redis round trips | engine calls | bytes |",
                      "|---|---:|---|---:|---:|---:|"]
            for name, q in queries.items():
                lines.append(f"| {LABELS.get(name, name)} | {q['sql']} | {q['by_verb']} | {q['redis_round_trips']} | "
                             f"{q['engine_calls']} | {q['response_bytes']} |")
            lines.append("")
    growth = summary.get("growth")
    if growth and growth.get("sizes"):
        lines += ["## Growth: cost per call by stored scans", "",
                  "| Stored scans | Call | RPS | p50 ms | p99 ms | API CPU ms | PostgreSQL CPU ms | buffer accesses "
                  "| rows scanned | rows fetched |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for row in growth["sizes"].values():
            for name in ("read", "bulk_read", "create"):
                f = row.get(name)
                if not f:
                    continue
                c, d = f["cpu_ms_per_request"], f["db_per_request"]
                lines.append(f"| {row['stored_scans']:,} | {name} | {f['rps']:.1f} | {f['p50_ms']:.2f} | "
                             f"{f['p99_ms']:.2f} | {c.get('api', 0):.3f} | {c.get('postgres', 0):.3f} | {d['blocks']} | "
                             f"{d['rows_scanned']} | {d['rows_fetched']} |")
        lines += ["", f"Bytes per stored scan (table `scan` with its indexes and TOAST): "
                      f"{growth['bytes_per_stored_scan']}; per ledger row: {growth['ledger_bytes_per_row']} "
                      f"({growth['note']}).", ""]
    for key, title in (("workers", "Workers"), ("latency", "Webhook latency")):
        if summary.get(key):
            lines += [f"## {title}", "", "```json", json.dumps(summary[key], indent=2), "```", ""]
    if summary.get("scale"):
        from bench import scale
        lines += scale.markdown(summary["scale"])
    if summary.get("watches") and "idle_tick" in summary["watches"]:
        from bench import watches
        lines += watches.markdown(summary["watches"])
    flushed = [k for k in ("http", "workers", "latency", "scale", "growth", "watches") if (summary.get(k) or {}).get("redis_flushed")]
    if flushed:
        lines += [f"**Warning**: Redis db {REDIS_DB} was flushed by another process during: {', '.join(flushed)}; "
                  "those figures are not valid.", ""]
    lines += ["## Goals", "", "| Goal | Value | Target | Met |", "|---|---:|---:|---|"]
    for g in summary.get("goals", []):
        met = "n/a" if g["met"] is None else ("yes" if g["met"] else "**no**")
        lines.append(f"| {g['goal']} | {g['value']} | {g['target']} | {met} |")
    return "\n".join(lines) + "\n"
