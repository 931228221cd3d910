"""Same seed, same results: each spec trained at two checkouts writes the same metrics.jsonl, timings aside.

Proves that a change to the runtime (e.g. a refactor of the step runner) leaves training unchanged: every spec
given runs for 10 steps at checkout BEFORE and at checkout AFTER, one run at a time, each as

    PYTHONPATH=DIR <venv>/bin/rlgraph run DIR/specs/NAME.rl --output TMP/NAME_{before,after} --no-resume \\
        -s train.steps=10 -s train.validate_every=5 -s train.checkpoint_every=0

(cwd DIR), and the two metrics.jsonl are compared line by line: the same steps, the same keys, and every value
equal (exactly; NaN equals NaN) except timings, the keys that start with `timing_s/` or `startup_s/`
or contain `time` or `throughput` (perf/total_num_tokens, a count, is compared).

    .venv/bin/python bench/same_results.py --before ../wt-old --after . [SPEC.rl ...] [--output FILE]

Default specs: every specs/*.rl of AFTER whose pools are all `device = cpu` (read off its Plan at AFTER);
specs/ppo_qwen7b_rm_2x8.rl and any other GPU spec are skipped. A stage spec (`model m { path = "run:X.rl" }`,
e.g. sft_then_grpo_arith.rl) starts from its prerequisite X trained at the same checkout with the same
overrides (run first if not already among the specs; its checkpoint at the last step is the model), via
`-s 'model.m.path="run:TMP/X_{before,after}"'`.

Prints a table (spec, steps compared, metrics compared, differences and the first differing keys with both
values), writes the JSON result (--output, default bench/results/same_results.json) and exits 1 if any spec
differs or a run fails. The run directories are kept under --workdir (default: a new temporary directory).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SKIP = {"ppo_qwen7b_rm_2x8.rl": "GPU pools (2 nodes x 8 GPUs)"}
OVERRIDES = ["train.steps=10", "train.validate_every=5", "train.checkpoint_every=0"]
TIMING_PREFIXES = ("timing_s/", "startup_s/")
TIMING_WORDS = ("time", "throughput")  # perf/time_per_step, perf/throughput; perf/total_num_tokens is a count
SHOWN = 5  # differing keys shown per spec

# Run at a checkout (PYTHONPATH=DIR) so that the spec is read by that checkout's compiler: the pools' devices
# and the models that are another run's output (stages), of each spec named on the command line.
_INSPECT = r"""
import json, sys
import rlgraph
out = {}
for path in sys.argv[1:]:
    spec = rlgraph.compile(path)
    plan = spec.plan()
    stages = {name: m.path[4:] for name, m in plan.models.items() if (m.path or "").startswith("run:")}
    out[path] = {"ok": spec.ok, "devices": sorted({p.device for p in plan.pools}), "stages": stages}
print(json.dumps(out))
"""


def is_timing(key: str) -> bool:
    return key.startswith(TIMING_PREFIXES) or any(word in key for word in TIMING_WORDS)


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def inspect_specs(checkout: Path, python: Path, names: list[str]) -> dict[str, Any]:
    paths = [f"specs/{name}" for name in names]
    done = subprocess.run([str(python), "-c", _INSPECT, *paths], cwd=checkout, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(checkout)})
    if done.returncode != 0:
        raise SystemExit(f"reading the specs at {checkout} failed:\n{done.stderr[-3000:]}")
    return {Path(p).name: info for p, info in json.loads(done.stdout).items()}


def train(rlgraph: Path, checkout: Path, name: str, run_dir: Path, extra: list[str], log: Path,
          timeout: float) -> dict[str, Any]:
    """One `rlgraph run` of specs/NAME at CHECKOUT into RUN_DIR: its exit status and wall time."""
    command = [str(rlgraph), "run", str(checkout / "specs" / name), "--output", str(run_dir), "--no-resume"]
    for override in OVERRIDES + extra:
        command += ["-s", override]
    start = time.perf_counter()
    with log.open("w") as out:
        try:
            rc = subprocess.run(command, cwd=checkout, stdout=out, stderr=subprocess.STDOUT, timeout=timeout,
                                env={**os.environ, "PYTHONPATH": str(checkout)}).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    return {"command": " ".join(command), "rc": rc, "wall_s": round(time.perf_counter() - start, 1),
            "log": str(log)}


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def compare(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> dict[str, Any]:
    """Line by line: steps, keys and every non-timing value."""
    differences: list[dict[str, Any]] = []
    compared = 0
    steps = []
    if len(before) != len(after):
        differences.append({"line": None, "key": "<lines>", "before": len(before), "after": len(after)})
    for line, (b, a) in enumerate(zip(before, after)):
        step_b, step_a = b.get("training/global_step"), a.get("training/global_step")
        if step_b != step_a:
            differences.append({"line": line, "key": "training/global_step", "before": step_b, "after": step_a})
        steps.append(step_b)
        for key in sorted(set(b) | set(a)):
            if is_timing(key):
                continue
            if key not in b or key not in a:
                differences.append({"line": line, "step": step_b, "key": key, "before": b.get(key, "<missing>"),
                                    "after": a.get(key, "<missing>")})
                continue
            compared += 1
            if not same(b[key], a[key]):
                differences.append({"line": line, "step": step_b, "key": key, "before": b[key], "after": a[key]})
    return {"lines": [len(before), len(after)], "steps": steps, "metrics_compared": compared,
            "differences": len(differences), "first_differences": differences[:SHOWN]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("specs", nargs="*", help="spec file names in AFTER's specs/ (default: every CPU spec)")
    parser.add_argument("--before", type=Path, required=True, help="checkout before the change")
    parser.add_argument("--after", type=Path, default=ROOT, help="checkout after the change (default: this one)")
    parser.add_argument("--rlgraph", type=Path, default=Path(sys.executable).with_name("rlgraph"),
                        help="the venv's rlgraph (default: beside this Python); PYTHONPATH picks the checkout")
    parser.add_argument("--workdir", type=Path, help="where the run directories go (default: a new temp dir)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per run")
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "same_results.json")
    args = parser.parse_args()
    sides = {"before": args.before.resolve(), "after": args.after.resolve()}
    python = args.rlgraph.with_name("python")
    work = (args.workdir or Path(tempfile.mkdtemp(prefix="same_results_"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    names = [Path(s).name for s in args.specs] or sorted(p.name for p in (sides["after"] / "specs").glob("*.rl"))
    skipped = {n: SKIP[n] for n in names if n in SKIP}
    info = inspect_specs(sides["after"], python, [n for n in names if n not in skipped])
    for name, spec in info.items():
        if not spec["ok"]:
            skipped[name] = "does not compile at AFTER"
        elif spec["devices"] != ["cpu"]:
            skipped[name] = f"pool devices {spec['devices']}"
    chosen = [n for n in names if n not in skipped]
    # A stage's prerequisite trains first, at the same checkout (and is compared too when it is among the specs).
    prerequisites = {n: sorted(set(info[n]["stages"].values())) for n in chosen}
    order: list[str] = []
    for name in chosen:
        order += [p for p in prerequisites[name] if p not in order]
        order += [name] if name not in order else []
    print(f"before {sides['before']}\nafter  {sides['after']}\nrun directories under {work}", flush=True)
    for name, why in skipped.items():
        print(f"skip {name}: {why}", flush=True)

    runs: dict[str, dict[str, Any]] = {}
    results: dict[str, dict[str, Any]] = {}
    for name in order:
        stem = Path(name).stem
        for side, checkout in sides.items():
            extra = [f'model.{model}.path="run:{work / (Path(spec).stem + "_" + side)}"'
                     for model, spec in info.get(name, {}).get("stages", {}).items()]
            run_dir = work / f"{stem}_{side}"
            runs.setdefault(name, {})[side] = run = train(args.rlgraph, checkout, name, run_dir, extra,
                                                          work / f"{stem}_{side}.log", args.timeout)
            print(f"  {name:32s} {side:6s} rc={run['rc']} {run['wall_s']:6.1f} s", flush=True)
        if name not in chosen:
            continue
        failed = [side for side, run in runs[name].items() if run["rc"] != 0]
        result = compare(read_metrics(work / f"{stem}_before"), read_metrics(work / f"{stem}_after"))
        result["failed_runs"] = failed
        result["runs"] = runs[name]
        results[name] = result

    print()
    print(f"{'spec':32s} {'steps':>5s} {'metrics':>7s} {'diffs':>5s}  first differing keys (before -> after)")
    for name in chosen:
        r = results[name]
        note = ("RUN FAILED: " + ", ".join(r["failed_runs"]) + "; ") if r["failed_runs"] else ""
        note += "; ".join(f"{d['key']}@{d.get('step')}: {d['before']!r} -> {d['after']!r}"
                          for d in r["first_differences"])
        print(f"{name:32s} {len(r['steps']):5d} {r['metrics_compared']:7d} {r['differences']:5d}  {note}")
    differ = [n for n in chosen if results[n]["differences"] or results[n]["failed_runs"]]
    total = round(time.perf_counter() - started, 1)
    print(f"\n{len(chosen) - len(differ)} of {len(chosen)} specs the same; {total} s in all")

    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({
        "before": str(sides["before"]), "after": str(sides["after"]), "overrides": OVERRIDES,
        "timing_keys": {"prefixes": TIMING_PREFIXES, "containing": TIMING_WORDS}, "workdir": str(work),
        "skipped": skipped, "results": results, "differ": differ, "total_s": total}, indent=2) + "\n")
    print(f"result: {args.output}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
