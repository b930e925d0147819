"""The median of several runs: ``python -m bench.median DIR [DIR ...]`` (results directories).

Per loaded HTTP target: RPS, p50 and p99 (and CPU ms per request by component); per ratio
and goal of ``bench.report``: each run's value and their median, which is what the goals
are judged on (one run on a shared 2-vCPU machine varies by 10-30%).
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from bench.report import GOALS, LABELS


def load(paths):
    return [(Path(p).name, json.loads((Path(p) / "summary.json").read_text())) for p in paths]


def median(values):
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("usage: python -m bench.median DIR [DIR ...]", file=sys.stderr)
        return 2
    runs = load(argv)
    names = [name for name, _ in runs]
    targets = []
    for _, summary in runs:
        for target in (summary.get("http") or {}).get("loaded", {}):
            if target not in targets:
                targets.append(target)
    print(f"Runs: {', '.join(names)}\n")
    print("| Target | RPS (each run) | median RPS | median p50 ms | median p99 ms | median CPU ms: api / floor / postgres |")
    print("|---|---|---:|---:|---:|---|")
    for target in targets:
        figures = [(s.get("http") or {}).get("loaded", {}).get(target) for _, s in runs]
        figures = [f for f in figures if f]
        cpu = {c: median([f.get("cpu_ms_per_request", {}).get(c) for f in figures]) for c in ("api", "floor", "postgres")}
        each = " / ".join(f"{f['rps']:.0f}" for f in figures)
        print(f"| {LABELS.get(target, target)} | {each} | "
              f"{median([f['rps'] for f in figures])} | {median([f['p50_ms'] for f in figures])} | "
              f"{median([f['p99_ms'] for f in figures])} | {cpu['api']} / {cpu['floor']} / {cpu['postgres']} |")
    keys = []
    for _, summary in runs:
        for key in (summary.get("ratios") or {}).get("loaded", {}):
            if key not in keys:
                keys.append(key)
    print("\n| Ratio (loaded) | each run | median |\n|---|---|---:|")
    for key in keys:
        values = [(s.get("ratios") or {}).get("loaded", {}).get(key) for _, s in runs]
        print(f"| {key} | {' / '.join(str(v) for v in values)} | {median(values)} |")
    print("\n| Goal | each run | median | target | met (median) |\n|---|---|---:|---:|---|")
    for key, (op, target, text) in GOALS.items():
        values = [next((g["value"] for g in s.get("goals", []) if g.get("key") == key), None) for _, s in runs]
        value = median(values)
        met = "n/a" if value is None else ("yes" if (value >= target if op == ">=" else value <= target if op == "<="
                                                     else value < target) else "**no**")
        print(f"| {text} | {' / '.join(str(v) for v in values)} | {value} | {op} {target:g} | {met} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
