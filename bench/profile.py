"""CPU profiles of a gunicorn under load, with py-spy (``python -m bench --profile``).

``record`` samples (holding the GIL: CPU, not waiting) every worker process of a gunicorn master while one wrk target runs
(``--nonblocking``: the workers are not paused, so the figures stay the figures) into
py-spy's collapsed-stack text; ``top`` reads such a file back: the share of samples in
which each function is on the stack (inclusive) and at the top (self), which is what
docs/performance.md quotes. py-spy is in requirements-test.txt.

    python -m bench.profile bench/results/<run>/profile-loaded-read.txt [N]
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path


def available() -> bool:
    return shutil.which("py-spy") is not None or (Path(sys.executable).parent / "py-spy").exists()


def record(pid: int, duration: float, out: Path) -> subprocess.Popen:
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return subprocess.Popen([exe, "record", "--pid", str(pid), "--subprocesses", "--nonblocking", "--gil", "--rate", "200",
                             "--duration", str(max(1, int(duration))), "--format", "raw", "--output", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def top(path: Path, n: int = 25) -> dict:
    inclusive, own, total = Counter(), Counter(), 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        count = int(count)
        frames = [f for f in stack.split(";") if not f.startswith("process ") and not f.startswith("thread ")]
        if not frames:
            continue
        total += count
        for frame in set(frames):
            inclusive[frame] += count
        own[frames[-1]] += count
    share = lambda c: round(100 * c / total, 1) if total else 0.0  # noqa: E731
    return {"samples": total,
            "inclusive_pct": [(f, share(c)) for f, c in inclusive.most_common(n)],
            "self_pct": [(f, share(c)) for f, c in own.most_common(n)]}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("usage: python -m bench.profile PROFILE.txt [N]", file=sys.stderr)
        return 2
    result = top(Path(argv[0]), int(argv[1]) if len(argv) > 1 else 25)
    print(f"{result['samples']} samples")
    for title in ("inclusive_pct", "self_pct"):
        print(f"\n{title}:")
        for frame, pct in result[title]:
            print(f"{pct:6.1f}%  {frame}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
