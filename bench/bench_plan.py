"""How long compile + plan take as a spec grows to 1,000 roles and calls, in-process.

    .venv/bin/python bench/bench_plan.py [--sizes 10 100 1000] [--repeats 5] [--output bench/results/plan.json]

A generated spec of size N has about N roles + calls: N/4 ref roles (half
colocated with the actor, half on pools of their own, one pool each), a
log-prob call for each, and a chain of transform calls
(`r_i, old_log_prob, ref_lp0 -> kl_penalty -> r_i+1`) for the rest. Each size is written to a
temporary file, then `compile_spec` + `build_plan` run `--repeats` times after
one warm-up; the median is reported. Also timed: rendering the plan as json
and html, and the whole `rlgraph plan` command on the shipped 2 x 8 spec as a
user runs it (a fresh process). Target: compile + plan < 1 s at N = 1000.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import write_result

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def make_spec(size: int) -> tuple[str, int, int]:
    """A valid spec with about `size` roles + calls; returns (text, roles, calls)."""
    refs = max(size // 4, 1)
    chain = max(size - 2 * refs - 6, 1)
    own = refs // 2  # refs with a pool of their own
    lines = ["rlgraph 1", 'model policy { path = "builtin:arith-gpt" }',
             "pool main { nodes = 2  devices_per_node = 4 }",
             "role actor { model = policy  pool = main  replicas = 8 }",
             "role rollout { colocate = actor  n = 4 }",
             'reward exact { fn = "rlgraph.tasks.arith:exact_match" }',
             'data { train = "builtin:arith/train"  batch_size = 32 }']
    for i in range(refs):
        if i < own:
            lines.append(f"pool p{i} {{ nodes = 1  devices_per_node = 1 }}")
            lines.append(f"role ref{i} {{ kind = ref  model = policy  pool = p{i} }}")
        else:
            lines.append(f"role ref{i} {{ kind = ref  model = policy  colocate = actor }}")
    step = ["sync actor -> rollout", "prompts -> rollout.generate -> responses", "responses -> exact -> scores",
            "responses -> actor.log_prob -> old_log_prob"]
    for i in range(refs):
        step.append(f"responses -> ref{i}.log_prob -> ref_lp{i}")
        step.append(f"scores, old_log_prob, ref_lp{i} -> kl_penalty -> kl{i}")
    step.append("scores, old_log_prob, ref_lp0 -> kl_penalty -> r0")
    for i in range(chain - 2):
        step.append(f"r{i}, old_log_prob, ref_lp0 -> kl_penalty -> r{i + 1}")
    step.append(f"r{max(chain - 2, 0)} -> grpo_advantage -> advantages")
    step.append("old_log_prob, advantages -> actor.update")
    lines.append("step {\n  " + "\n  ".join(step) + "\n}")
    calls = len(step) - 1  # the sync is not a call
    return "\n".join(lines) + "\n", refs + 2, calls


def _median_time(fn, repeats: int, clock=time.perf_counter) -> tuple[float, list[float]]:
    fn()  # warm-up: grammar, imports, caches
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        times.append(clock() - start)
    return statistics.median(times), times


def bench_size(size: int, repeats: int, folder: Path) -> dict:
    from rlgraph.compiler import compile_spec
    from rlgraph.plan.build import build_plan
    from rlgraph.plan.html import render_html

    text, roles, calls = make_spec(size)
    path = folder / f"bench_{size}.rl"
    path.write_text(text)

    def compile_and_plan():
        return build_plan(compile_spec(str(path)))

    plan = compile_and_plan()
    errors = [d for d in plan.diagnostics if d["severity"] == "error"]
    if errors:
        raise SystemExit(f"the generated spec of size {size} has errors: {errors[:3]}")
    median, times = _median_time(compile_and_plan, repeats)
    cpu_median, _ = _median_time(compile_and_plan, repeats, clock=time.process_time)  # robust to a busy machine
    compile_median, _ = _median_time(lambda: compile_spec(str(path)), repeats)
    compilation = compile_spec(str(path))
    plan_median, _ = _median_time(lambda: build_plan(compilation), repeats)
    json_median, _ = _median_time(plan.to_json, repeats)
    html_median, _ = _median_time(lambda: render_html(plan), max(repeats // 2, 1))
    return {"size": size, "roles": roles, "calls": calls, "pools": len(plan.pools), "stages": len(plan.schedule),
            "devices": sum(p.nodes * p.devices_per_node for p in plan.pools),
            "compile_plan_median_s": round(median, 4), "compile_plan_cpu_median_s": round(cpu_median, 4),
            "compile_median_s": round(compile_median, 4),
            "plan_median_s": round(plan_median, 4),
            "render_json_median_s": round(json_median, 4), "render_html_median_s": round(html_median, 4),
            "compile_plan_all_s": [round(t, 4) for t in times]}


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def bench_cli(repeats: int) -> dict | None:
    """Wall and CPU seconds (medians) of `rlgraph plan` on the shipped 2 x 8 spec, as a fresh process."""
    spec = ROOT / "specs" / "ppo_qwen7b_rm_2x8.rl"
    if not spec.exists():
        return None
    out = {}
    commands = {fmt: [sys.executable, "-m", "rlgraph.cli", "plan", str(spec.relative_to(ROOT)), "--format", fmt]
                for fmt in ("text", "json", "html")}
    commands["python_startup"] = [sys.executable, "-c", "pass"]
    for name, command in commands.items():
        subprocess.run(command, cwd=ROOT, capture_output=True, check=True)
        wall, cpu = [], []
        for _ in range(repeats):
            start, start_cpu = time.perf_counter(), _child_cpu()
            subprocess.run(command, cwd=ROOT, capture_output=True, check=True)
            wall.append(time.perf_counter() - start)
            cpu.append(_child_cpu() - start_cpu)
        out[name] = {"wall_s": round(statistics.median(wall), 4), "cpu_s": round(statistics.median(cpu), 4)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "plan.json"))
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        rows = [bench_size(size, args.repeats, Path(tmp)) for size in args.sizes]
    cli = bench_cli(args.repeats)
    print(f"{'size':>6} {'roles':>6} {'calls':>6} {'compile+plan':>13} {'(cpu)':>9} {'plan only':>10} "
          f"{'json':>8} {'html':>8}")
    for r in rows:
        print(f"{r['size']:>6} {r['roles']:>6} {r['calls']:>6} {r['compile_plan_median_s'] * 1000:>10.1f} ms "
              f"{r['compile_plan_cpu_median_s'] * 1000:>6.1f} ms {r['plan_median_s'] * 1000:>7.1f} ms "
              f"{r['render_json_median_s'] * 1000:>5.1f} ms {r['render_html_median_s'] * 1000:>5.1f} ms")
    if cli:
        print("fresh process, specs/ppo_qwen7b_rm_2x8.rl: " + ", ".join(
            f"{k} {v['wall_s'] * 1000:.0f} ms (cpu {v['cpu_s'] * 1000:.0f} ms)" for k, v in cli.items()))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    result = {"benchmark": "compile_spec + build_plan, in-process, median", "repeats": args.repeats,
              "target_s": 1.0, "sizes": rows, "cli_2x8_median_s": cli,
              "python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
              "load_average_1min": load}
    # the run id ties the result to its `make bench` run: the doc is rendered from one run's files only
    write_result(Path(args.output).stem, result, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
