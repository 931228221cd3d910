"""Scale-out on this machine: PPO training throughput with 1 and 2 data-parallel replicas (ddp and fsdp), and the cost
of weight sync (`timing_s/sync`) with the rollout colocated (hybrid engine) vs on a pool of its own.

    .venv/bin/python bench/bench_scaleout.py [--steps 8] [--smoke]     # writes bench/results/scaleout.json

Each configuration is one `rlgraph run` of specs/ppo_arith.rl (its own local Ray) with -s overrides;
the first step is a warm-up and is left out of the medians. samples/s = batch_size x n / step time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import write_result

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "specs" / "ppo_arith.rl"
BATCH, N = 32, 4

# ppo_arith.rl with the rollout on a pool of its own: its weights come through the object store each step
SEPARATE = SPEC.read_text().replace(
    "pool main { nodes = 1  devices_per_node = 1  device = cpu }",
    "pool main { nodes = 1  devices_per_node = 1  device = cpu }\npool gen { nodes = 1  devices_per_node = 1  device = cpu }",
).replace("role rollout { colocate = actor ", "role rollout { model = policy  pool = gen ")

CONFIGS = {
    "dp1 (colocated)": (SPEC, []),
    "dp2 (colocated)": (SPEC, ["main.devices_per_node=2", "actor.replicas=2"]),
    "fsdp2 (colocated)": (SPEC, ["main.devices_per_node=2", "actor.replicas=2", "actor.strategy=fsdp",
                                 "critic.strategy=fsdp"]),
    "dp1, rollout on its own pool": (None, []),
}


def run(spec: Path, overrides: list[str], steps: int, out: Path) -> list[dict]:
    sets = [f"train.steps={steps}", f"data.batch_size={BATCH}", "train.validate_every=0",
            "train.checkpoint_every=0", *overrides]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    cmd = [sys.executable, "-m", "rlgraph.cli", "run", str(spec), "--output", str(out), "--no-resume"]
    for s in sets:
        cmd += ["-s", s]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--smoke", action="store_true", help="2 steps of each configuration")
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    if args.smoke:
        args.steps = 2
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        separate = Path(tmp) / "ppo_arith_separate.rl"
        separate.write_text(SEPARATE)
        for name, (spec, overrides) in CONFIGS.items():
            t0 = time.perf_counter()
            records = [r for r in run(spec or separate, overrides, args.steps, Path(tmp) / name.replace(" ", "_"))
                       if r["training/global_step"] >= 2]  # step 1 is the warm-up
            step_s = statistics.median(r["timing_s/step"] for r in records)
            results[name] = {
                "s_per_step": round(step_s, 3),
                "samples_per_s": round(BATCH * N / step_s, 1),
                "sync_s": round(statistics.median(r["timing_s/sync"] for r in records), 4),
                "gen_s": round(statistics.median(r["timing_s/gen"] for r in records), 3),
                "update_actor_s": round(statistics.median(r["timing_s/update_actor"] for r in records), 3),
                "steps_measured": len(records),
                "wall_s": round(time.perf_counter() - t0, 1),
                "overrides": overrides if spec else ["the spec with `pool gen`, `role rollout { pool = gen }`"],
            }
            print(f"{name:32s} {json.dumps(results[name])}", flush=True)
    write_result("smoke_scaleout" if args.smoke else "scaleout", {
        "cpus": os.cpu_count(), "batch_size": BATCH, "n": N, "steps": args.steps, "configs": results}, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
