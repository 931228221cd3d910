"""Asynchronous training against synchronous: steps per second and accuracy after equal wall time.

    .venv/bin/python bench/bench_async.py [--steps 60] [--seeds 0 1] [--validate-every 5] [--smoke]

GRPO on the built-in task with the rollout and the actor on one-device pools of their own
(bench/specs/grpo_async.rl), run with `rlgraph run` as a user would, at train.staleness 0 (synchronous) and 1
(the rollout generates the next batch while the actor trains), each over every seed. Per run:

- steps per second: steps / the sum of their `timing_s/step` (validation, which both settings do alike, is
  not in it), after the first `--warmup` steps;
- the ideal overlap, from the synchronous runs: the step time of the slower loop alone, max(rollout loop =
  generate + weight sync, trainer loop = the rest of the step), so the gap to perfect pipelining shows;
- greedy validation accuracy against training wall time (the cumulative `timing_s/step`): the curves go to
  docs/images/async_accuracy.png, and "accuracy after equal wall time" compares each setting's accuracy at
  the end of the shortest run.

The target (issue 14): staleness 1 at least 1.4x the steps per second of staleness 0, and equal or better
accuracy after equal wall time, each judged against the spread over seeds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import RLGRAPH, ROOT, judge, load_average, machine_facts, spread, write_result

SPEC = "bench/specs/grpo_async.rl"
IMAGE = ROOT / "docs" / "images" / "async_accuracy.png"
TARGET_SPEEDUP = 1.4


def run(staleness: int, seed: int, steps: int, validate_every: int, out: Path) -> list[dict[str, Any]]:
    command = [*RLGRAPH, "run", SPEC, "--output", str(out), "--no-resume", "-s", f"train.staleness={staleness}",
               "-s", f"train.seed={seed}", "-s", f"train.steps={steps}", "-s", f"train.validate_every={validate_every}",
               "-s", "train.checkpoint_every=0", "-s", "train.samples_every=0"]
    print(f"--- staleness {staleness}, seed {seed}: {' '.join(command[2:])}", flush=True)
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the run failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


def summarise(records: list[dict[str, Any]], warmup: int) -> dict[str, Any]:
    steps = [r for r in records if r["training/global_step"] > 0]
    timed = steps[warmup:]
    seconds = sum(r["timing_s/step"] for r in timed)
    rollout_loop = statistics.fmean(r.get("timing_s/gen", 0.0) + r.get("timing_s/sync", 0.0) for r in timed)
    trainer_loop = statistics.fmean(r["timing_s/step"] - r.get("timing_s/wait_for_rollout", 0.0)
                                    - r.get("timing_s/sync", 0.0) for r in timed)
    clock, curve = 0.0, []
    for r in records:
        clock += r.get("timing_s/step", 0.0)
        if r.get("val/score/mean") is not None:
            curve.append((round(clock, 3), r["val/score/mean"], r["training/global_step"]))
    return {"steps_per_s": len(timed) / seconds, "step_s": seconds / len(timed), "rollout_loop_s": rollout_loop,
            "trainer_loop_s": trainer_loop, "train_wall_s": clock, "curve": curve,
            "staleness_max": max(r.get("async/staleness_max", 0) for r in steps),
            "wait_for_rollout_s": statistics.fmean(r.get("timing_s/wait_for_rollout", 0.0) for r in timed),
            "wait_for_weights_s": statistics.fmean(r.get("timing_s/wait_for_weights", 0.0) for r in timed)}


def accuracy_at(curve: list[tuple[float, float, int]], wall: float) -> float:
    """The accuracy of the last validation at or before `wall` seconds of training."""
    return [acc for t, acc, _ in curve if t <= wall + 1e-9][-1]


def plot(runs: dict[str, list[dict[str, Any]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    colors = {"staleness 0": "#4c72b0", "staleness 1": "#dd8452"}
    for setting, results in runs.items():
        for i, result in enumerate(results):
            t, acc, _ = zip(*result["curve"])
            ax.plot(t, acc, marker="o", markersize=3, color=colors.get(setting), alpha=0.9 if i == 0 else 0.55,
                    linestyle="-" if i == 0 else "--", label=f"{setting}, seed {result['seed']}")
    ax.set_xlabel("training wall time (s, validation excluded)")
    ax.set_ylabel("greedy validation accuracy (val/score/mean)")
    ax.set_title("GRPO on arith, rollout and actor on separate CPU devices")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--validate-every", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="2 steps, one seed; no image")
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.seeds, args.validate_every, args.warmup = 3, [0], 0, 1
    started = time.perf_counter()
    runs: dict[str, list[dict[str, Any]]] = {"staleness 0": [], "staleness 1": []}
    with tempfile.TemporaryDirectory(prefix="rlgraph-bench-async-") as tmp:
        for seed in args.seeds:  # the settings alternate, so a slow spell of the machine hits both
            for staleness in (0, 1):
                records = run(staleness, seed, args.steps, args.validate_every, Path(tmp) / f"s{staleness}-{seed}")
                runs[f"staleness {staleness}"].append({"seed": seed, **summarise(records, args.warmup)})
    sync, pipelined = runs["staleness 0"], runs["staleness 1"]
    rate0 = spread([r["steps_per_s"] for r in sync])
    rate1 = spread([r["steps_per_s"] for r in pipelined])
    speedup = rate1["mean"] / rate0["mean"]
    # the ratio's spread: from the extremes of the two settings' runs
    speedup_spread = (rate1["max"] / rate0["min"] - rate1["min"] / rate0["max"]) / 2
    ideal_step = statistics.fmean(max(r["rollout_loop_s"], r["trainer_loop_s"]) for r in sync)
    ideal = statistics.fmean(r["step_s"] for r in sync) / ideal_step
    result: dict[str, Any] = {
        "spec": SPEC, "steps": args.steps, "seeds": args.seeds, "validate_every": args.validate_every,
        "warmup": args.warmup, "runs": runs, "steps_per_s": {"staleness 0": rate0, "staleness 1": rate1},
        "speedup": speedup, "speedup_spread": speedup_spread, "ideal_speedup": ideal, "ideal_step_s": ideal_step,
        "target_speedup": TARGET_SPEEDUP,
        "speedup_verdict": judge(speedup - TARGET_SPEEDUP, speedup_spread, len(args.seeds)),
        "machine": machine_facts(), "load_average_end": load_average(),
    }
    if args.validate_every:
        wall = min(r["train_wall_s"] for r in sync + pipelined)  # equal wall time: the shortest run's
        acc0 = spread([accuracy_at(r["curve"], wall) for r in sync])
        acc1 = spread([accuracy_at(r["curve"], wall) for r in pipelined])
        noise = max(acc0["range"], acc1["range"])
        result["accuracy_at_equal_wall"] = {"wall_s": wall, "staleness 0": acc0, "staleness 1": acc1,
                                            "difference": acc1["mean"] - acc0["mean"],
                                            "verdict": ("met" if acc1["mean"] - acc0["mean"] >= -noise else "missed")
                                            if len(args.seeds) > 1 else "–"}
        if not args.smoke:
            plot(runs, IMAGE)
            result["image"] = str(IMAGE.relative_to(ROOT))
    result["seconds"] = time.perf_counter() - started
    path = write_result("smoke_async" if args.smoke else "async", result, args.output)
    print(f"steps/s: staleness 0 {rate0['mean']:.3f} ({rate0['min']:.3f}-{rate0['max']:.3f}), staleness 1 "
          f"{rate1['mean']:.3f} ({rate1['min']:.3f}-{rate1['max']:.3f}); speedup {speedup:.2f}x ± {speedup_spread:.2f} "
          f"(target {TARGET_SPEEDUP}x: {result['speedup_verdict']}); ideal overlap {ideal:.2f}x")
    if "accuracy_at_equal_wall" in result:
        a = result["accuracy_at_equal_wall"]
        print(f"accuracy after {a['wall_s']:.1f} s of training: staleness 0 {a['staleness 0']['mean']:.3f} "
              f"{a['staleness 0']['values']}, staleness 1 {a['staleness 1']['mean']:.3f} {a['staleness 1']['values']} "
              f"({a['verdict']})")
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())


def doc_section(result: dict[str, Any]) -> list[str]:
    """The section of docs/benchmarks.md (bench/run_all.py renders it from bench/results/async.json)."""
    rates, runs = result["steps_per_s"], result["runs"]

    def rng(s: dict[str, Any], digits: int = 3) -> str:
        return f"{s['mean']:.{digits}f} ({', '.join(f'{v:.{digits}f}' for v in s['values'])})"

    out = ["### Asynchronous training: staleness 1 against 0", "",
           f"`.venv/bin/python bench/bench_async.py --steps {result['steps']} --seeds "
           f"{' '.join(map(str, result['seeds']))}`: `rlgraph run {result['spec']}` (GRPO, rollout and actor on "
           "one-device CPU pools of their own) at train.staleness 0 and 1, one run per seed each, alternating; steps "
           f"per second over the steps after the first {result['warmup']} (validation excluded).", "",
           "| | staleness 0 | staleness 1 | ratio | target | |", "|---|---|---|---|---|---|",
           f"| steps per second, mean (per seed) | {rng(rates['staleness 0'])} | {rng(rates['staleness 1'])} | "
           f"{result['speedup']:.2f}x ± {result['speedup_spread']:.2f} | ≥ {result['target_speedup']}x | "
           f"{result['speedup_verdict']} |",
           f"| ideal overlap (step time of the slower loop alone, from the synchronous runs) | | | "
           f"{result['ideal_speedup']:.2f}x | | |",
           "| the asynchronous step against its own slower loop (1.00 = perfect pipelining) | | "
           + ", ".join(f"{r['step_s'] / max(r['rollout_loop_s'], r['trainer_loop_s']):.3f}" for r in runs["staleness 1"])
           + " | | | |"]
    a = result.get("accuracy_at_equal_wall")
    if a:
        out.append(f"| greedy accuracy after {a['wall_s']:.1f} s of training | {rng(a['staleness 0'])} | "
                   f"{rng(a['staleness 1'])} | {a['difference']:+.3f} | equal or better | {a['verdict']} |")
    out.append("")
    for setting, results in runs.items():
        for r in results:
            out.append(f"- {setting}, seed {r['seed']}: step {r['step_s'] * 1000:.0f} ms; rollout loop "
                       f"{r['rollout_loop_s'] * 1000:.0f} ms, trainer loop {r['trainer_loop_s'] * 1000:.0f} ms; trainer "
                       f"waited {r['wait_for_rollout_s'] * 1000:.0f} ms a step for data, the rollout "
                       f"{r['wait_for_weights_s'] * 1000:.0f} ms for weights; max staleness {r['staleness_max']:.0f}")
    if result.get("image"):
        out += ["", f"![accuracy against wall time](../{result['image'].removeprefix('docs/')})"]
    return out + [""]
