"""The machine description and the summary (``summary.json``, ``summary.md``) of a run."""
from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path

from bench.stack import PG_ADMIN_DSN, ROOT

GOALS = {
    "read_rps_ratio": (">=", 0.50, "GET /scan/{id} RPS >= 50% of the baseline (1 customer)"),
    "read_many_rps_ratio": (">=", 0.50, "GET /scan/{id} RPS >= 50% of the baseline (N customers)"),
    "create_rps_ratio": (">=", 0.33, "POST /scan RPS >= 33% of the baseline (1 customer)"),
    "create_many_rps_ratio": (">=", 0.33, "POST /scan RPS >= 33% of the baseline (N customers)"),
    "bulk_p50_ratio": ("<=", 5.0, "POST /scan/bulk (100) p50 <= 5x POST /scan p50"),
    "bulk_read_p50_ratio": ("<=", 3.0, "GET /scan/bulk/{id} (100) p50 <= 3x GET /scan/{id} p50"),
    "webhook_p95_ms": ("<", 1000.0, "webhook received < 1 s after the engine is done (p95)"),
}

CPU_COLUMNS = ("api", "baseline", "postgres", "redis", "simulator", "wrk")

LABELS = {
    "baseline": "baseline: bare Flask `GET /json`",
    "read": "`GET /api/v1/scan/{id}` (completed, 1 customer)",
    "read_many": "`GET /api/v1/scan/{id}` (completed, N customers)",
    "read_queued": "`GET /api/v1/scan/{id}` (queued, 1 customer)",
    "bulk_read": "`GET /api/v1/scan/bulk/{id}` (100 completed)",
    "create": "`POST /api/v1/scan` (1 customer)",
    "create_many": "`POST /api/v1/scan` (N customers)",
    "bulk_create": "`POST /api/v1/scan/bulk` (100 targets)",
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
        if not base:
            continue
        r = {}
        for name in ("read", "read_many", "read_queued", "bulk_read", "create", "create_many", "bulk_create"):
            if name in figures and base["rps"]:
                r[f"{name}_rps_ratio"] = round(figures[name]["rps"] / base["rps"], 3)
        if "bulk_create" in figures and "create" in figures and figures["create"]["p50_ms"]:
            r["bulk_p50_ratio"] = round(figures["bulk_create"]["p50_ms"] / figures["create"]["p50_ms"], 2)
        if "bulk_read" in figures and "read" in figures and figures["read"]["p50_ms"]:
            r["bulk_read_p50_ratio"] = round(figures["bulk_read"]["p50_ms"] / figures["read"]["p50_ms"], 2)
        out[label] = r
    return out


def goals(summary: dict) -> list[dict]:
    loaded = summary.get("ratios", {}).get("loaded", {})
    values = {
        "read_rps_ratio": loaded.get("read_rps_ratio"),
        "read_many_rps_ratio": loaded.get("read_many_rps_ratio"),
        "create_rps_ratio": loaded.get("create_rps_ratio"),
        "create_many_rps_ratio": loaded.get("create_many_rps_ratio"),
        "bulk_p50_ratio": loaded.get("bulk_p50_ratio"),
        "bulk_read_p50_ratio": loaded.get("bulk_read_p50_ratio"),
        "webhook_p95_ms": (summary.get("latency") or {}).get("engine_done_to_received_ms", {}).get("p95"),
    }
    rows = []
    for key, (op, target, text) in GOALS.items():
        value = values[key]
        met = None if value is None else (value >= target if op == ">=" else value <= target if op == "<="
                                          else value < target)
        rows.append({"goal": text, "value": value, "target": f"{op} {target:g}", "met": met})
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
                      "| Target | RPS | p50 ms | p99 ms | RPS / baseline | non-2xx | socket errors |",
                      "|---|---:|---:|---:|---:|---:|---:|"]
            for name, f in figures.items():
                ratio = f"{f['rps'] / base:.2f}" if base else "-"
                errors = sum(f["socket_errors"].values()) if f["socket_errors"] else 0
                lines.append(f"| {LABELS.get(name, name)} | {f['rps']:.1f} | {f['p50_ms']:.2f} | {f['p99_ms']:.2f} | "
                             f"{ratio} | {f['non_2xx']} | {errors} |")
            lines += ["", "CPU milliseconds per request, by component (all processes of the machine's PostgreSQL "
                      "and Redis servers count):", "",
                      "| Target | " + " | ".join(CPU_COLUMNS) + " |", "|---|" + "---:|" * len(CPU_COLUMNS)]
            for name, f in figures.items():
                per = f.get("cpu_ms_per_request", {})
                lines.append(f"| {LABELS.get(name, name)} | " + " | ".join(f"{per.get(c, 0):.3f}" for c in CPU_COLUMNS)
                             + " |")
            r = summary["ratios"].get(label, {})
            lines += ["", f"Bulk of 100 p50 / single creation p50: **{r.get('bulk_p50_ratio')}**; "
                          f"aggregate read of 100 p50 / single read p50: **{r.get('bulk_read_p50_ratio')}**", ""]
        queries = http.get("queries") or {}
        if queries and "error" not in queries:
            lines += ["## Per request", "",
                      "| Request | SQL statements | by kind | Redis round trips | engine calls | bytes |",
                      "|---|---:|---|---:|---:|---:|"]
            for name, q in queries.items():
                lines.append(f"| {LABELS.get(name, name)} | {q['sql']} | {q['by_verb']} | {q['redis_round_trips']} | "
                             f"{q['engine_calls']} | {q['response_bytes']} |")
            lines.append("")
    for key, title in (("workers", "Workers"), ("latency", "Webhook latency"), ("scale", "Scale")):
        if summary.get(key):
            lines += [f"## {title}", "", "```json", json.dumps(summary[key], indent=2), "```", ""]
    flushed = [k for k in ("http", "workers", "latency", "scale") if (summary.get(k) or {}).get("redis_flushed")]
    if flushed:
        lines += [f"**Warning**: Redis db 11 was flushed by another process during: {', '.join(flushed)}; "
                  "those figures are not valid.", ""]
    lines += ["## Goals", "", "| Goal | Value | Target | Met |", "|---|---:|---:|---|"]
    for g in summary.get("goals", []):
        met = "n/a" if g["met"] is None else ("yes" if g["met"] else "**no**")
        lines.append(f"| {g['goal']} | {g['value']} | {g['target']} | {met} |")
    return "\n".join(lines) + "\n"
