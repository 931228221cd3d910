"""How long `rlgraph check specs/*.rl` takes, next to the cost of starting Python at all.

Runs each command as a fresh subprocess (what a user or CI pays), `--repeats`
times after one warm-up, and reports the medians and their ratio:

    .venv/bin/python bench/bench_check.py [--repeats 10] [--output bench/results/check.json]

The target: well under a second for `check` (docs/architecture.md).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import write_result

ROOT = Path(__file__).resolve().parents[1]


def _time(command: list[str], repeats: int) -> list[float]:
    subprocess.run(command, cwd=ROOT, capture_output=True, check=False)  # warm the file cache
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, check=False)
        times.append(time.perf_counter() - start)
        if done.returncode not in (0, 1):
            raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr.decode()}")
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "check.json"))
    args = parser.parse_args(argv)

    specs = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("specs/*.rl"))
    check = _time([sys.executable, "-m", "rlgraph.cli", "check", *specs], args.repeats)
    baseline = _time([sys.executable, "-c", "pass"], args.repeats)
    result = {
        "benchmark": "rlgraph check specs/*.rl",
        "specs": len(specs),
        "repeats": args.repeats,
        "check_median_s": round(statistics.median(check), 4),
        "python_median_s": round(statistics.median(baseline), 4),
        "ratio": round(statistics.median(check) / statistics.median(baseline), 2),
        "check_all_s": [round(t, 4) for t in check],
        "python_all_s": [round(t, 4) for t in baseline],
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    print(f"rlgraph check ({len(specs)} specs): {result['check_median_s'] * 1000:7.1f} ms  (median of {args.repeats})")
    print(f"python -c pass:            {result['python_median_s'] * 1000:7.1f} ms")
    print(f"ratio:                     {result['ratio']:7.1f}x")
    # the run id ties the result to its `make bench` run: the doc is rendered from one run's files only
    write_result(Path(args.output).stem, result, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
