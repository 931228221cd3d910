"""Rule rewards scored in parallel (`reward r { workers = N }`): one batch's scoring time against N.

    .venv/bin/python bench/bench_reward_workers.py [--repeats 3] [--smoke]     # writes bench/results/reward_workers.json

Two rewards, each on the same batch, through `RuleReward` with a timeout (as `rlgraph run` scores: in
child processes), for workers = 1, 2, 4:

- sleep: 4 rows whose function sleeps 0.5 s (a reward waiting on a sandbox or a server): the batch should
  take about the slowest row with 4 workers, not the sum;
- math: 128 rows of `rlgraph.tasks:default_compute_score` on `lighteval/MATH` answers (math-verify, CPU bound):
  it gains only up to the cores the machine has.

The first call of each (which starts the processes and imports the function) is reported apart; the figure
is the median of the calls after it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import load_average, machine_facts, spread, write_result

SLEEP = "import time\n\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n" \
        "    time.sleep(0.5)\n    return 1.0\n"


def batch(rows: int, data_source: str, truths: list[str], answers: list[str]):
    import torch

    from rlgraph.workers.batch import Rollout

    ones = torch.ones(rows, 2, dtype=torch.long)
    return Rollout.build(ones, ones, ones, ones, 0, uid=[i // 4 for i in range(rows)], data_source=[data_source] * rows,
                         ground_truth=truths, extra_info=[{"index": i} for i in range(rows)], prompt_text=["p"] * rows,
                         response_text=answers)


def measure(fn: str, rollout, workers: int, repeats: int) -> dict:
    from rlgraph.workers.reward import RuleReward

    reward = RuleReward(fn, timeout_s=60.0, workers=workers)
    try:
        started = time.perf_counter()
        reward.score(rollout)
        first = time.perf_counter() - started
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            reward.score(rollout)
            times.append(time.perf_counter() - started)
    finally:
        reward.close()
    return {"workers": workers, "first_call_s": first, "median_s": statistics.median(times), "spread": spread(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="one repeat, workers 1 and 2")
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    repeats, counts = (1, (1, 2)) if args.smoke else (args.repeats, (1, 2, 4))
    with tempfile.TemporaryDirectory() as folder:
        file = Path(folder) / "sleepy.py"
        file.write_text(SLEEP)
        sleep = batch(4, "my/sleep", ["1"] * 4, ["1"] * 4)
        rows = 128
        math = batch(rows, "lighteval/MATH", [f"\\frac{{{i}}}{{{i + 1}}}" for i in range(rows)],
                     [f"so \\boxed{{\\dfrac{{{i}}}{{{i + 1 + i % 2}}}}}" for i in range(rows)])
        result = {"load_before": load_average(), "machine": machine_facts(),
                  "sleep": [measure(f"{file}:compute_score", sleep, n, repeats) for n in counts],
                  "math": [measure("rlgraph.tasks:default_compute_score", math, n, repeats) for n in counts]}
    for name in ("sleep", "math"):
        for row in result[name]:
            print(f"{name:5} workers={row['workers']}: first call {row['first_call_s']:.2f} s, "
                  f"then median {row['median_s']:.2f} s", file=sys.stderr)
    print(write_result("smoke_reward_workers" if args.smoke else "reward_workers", result, args.output))


if __name__ == "__main__":
    main()
