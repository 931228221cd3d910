"""Where rlgraph's step time goes beyond the work: the step driver, timed from inside, per step.

    .venv/bin/python bench/profile_step.py [--specs ...] [--steps 30] [--warmup 5] [--smoke]

Runs `run_plan` in this process (a private local Ray instance, as `rlgraph run`), with timers
wrapped around the step driver's parts (nothing in rlgraph is changed; the wrappers are installed
on the classes before the run):

    launch          StepRunner.launch_call: building the arguments (ray.put of driver-made tensors) and
                    submitting the actor calls
    driver calls    StepRunner.run_on_driver: reward and transforms, with the ray.get of their inputs
                    (the Rollout, the log-probs, the values); it overlaps with the calls in flight
    wait            ray.wait on a stage's calls
    collect         Pending.seconds / Pending.result and the update metrics' ray.get after the wait
    batch metrics   the metrics of the batch at the end of the step
    loop            the rest of timing_s/step: the data loader, the weight sync, the loop's bookkeeping

The worker's own time in each call (timing_s/<stage> in metrics.jsonl) is subtracted from `wait`:
what is left is the latency of the Ray calls (submission, argument transfer and deserialisation in
the worker, result serialisation, the reply) during which the worker's CPU did not run the call.
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from common import NO_EXTRAS, STAGES, machine_facts, median, write_result

SPECS = ["specs/ppo_arith.rl", "specs/grpo_arith.rl"]


def profile(spec: str, steps: int, warmup: int, run_dir: Path) -> dict[str, Any]:
    import ray

    import rlgraph.runtime.driver as driver
    import rlgraph.runtime.step as step_module
    from rlgraph.compiler import compile_spec
    from rlgraph.plan.build import build_plan
    from rlgraph.runtime import run_plan
    from rlgraph.runtime.group import Pending

    per_step: list[dict[str, float]] = []
    current: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    depth = [0]

    def timed(label: str, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            outer = depth[0] == 0  # count a nested timer (a wait inside a fetch) once, in the outer bucket
            depth[0] += 1
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                depth[0] -= 1
                if outer:
                    current[label] += time.perf_counter() - start
                    calls[label] += 1
        return wrapper

    originals = {
        (step_module.StepRunner, "launch_call"): "launch", (step_module.StepRunner, "run_on_driver"): "driver calls",
        (Pending, "seconds"): "collect", (Pending, "result"): "collect",
    }
    saved = [(owner, name, getattr(owner, name)) for owner, name in originals]
    saved_wait, saved_get, saved_metrics = driver.ray.wait, driver.ray.get, step_module.batch_metrics
    runners = (step_module.StepRunner, driver.RemoteStep)  # through Ray, or the whole step in one process
    originals_of = {runner: (runner.launch, runner.finish) for runner in runners}
    started = [0.0]

    # a step is launch (its generate sent) then finish (the rest): synchronously one right after the other
    def launch(self, step, prompts, version=None):
        current.clear()
        depth[0] = 0
        started[0] = time.perf_counter()
        return originals_of[type(self)][0](self, step, prompts, version)

    def finish(self, flight):
        result = originals_of[type(self)][1](self, flight)
        current["driver.run"] = time.perf_counter() - started[0]
        current["in one process"] = float(isinstance(self, driver.RemoteStep))
        per_step.append(dict(current))
        return result

    try:
        for (owner, name), label in originals.items():
            setattr(owner, name, timed(label, getattr(owner, name)))
        driver.ray.wait = timed("wait", saved_wait)
        driver.ray.get = timed("collect", saved_get)  # ray.get outside the other timers: the update metrics
        step_module.batch_metrics = timed("batch metrics", saved_metrics)
        for runner in runners:
            runner.launch, runner.finish = launch, finish
        plan = build_plan(compile_spec(spec, [f"train.steps={steps}", *NO_EXTRAS]))
        result = run_plan(plan, run_dir, resume=False)
    finally:
        for owner, name, fn in saved:
            setattr(owner, name, fn)
        driver.ray.wait, driver.ray.get, step_module.batch_metrics = saved_wait, saved_get, saved_metrics
        for runner in runners:
            runner.launch, runner.finish = originals_of[runner]
        if ray.is_initialized():
            ray.shutdown()

    records = [r for r in result.records if r.get("training/global_step", 0) >= 1]
    rows = []
    for record, timers in list(zip(records, per_step))[warmup:]:
        local = bool(timers.get("in one process"))
        # in one process the rewards and transforms run there too, and the whole step is one ray.get
        worker = sum(record.get(f"timing_s/{name}") or 0.0 for name in STAGES
                     if local or name not in ("reward", "adv"))
        row = {k: v for k, v in timers.items() if k != "in one process"}
        row["step"] = record["timing_s/step"]
        row["worker compute"] = worker
        # the worker computes only inside waits (in one process: inside the step's one call)
        row["ray latency"] = (timers.get("collect", 0.0) if local else timers.get("wait", 0.0)) - worker
        if local:
            row["collect"] = 0.0
        row["loop"] = record["timing_s/step"] - timers["driver.run"]
        rows.append(row)
    keys = ["step", "worker compute", "ray latency", "launch", "driver calls", "wait", "collect", "batch metrics",
            "loop", "driver.run"]
    medians = {k: median([r.get(k, 0.0) for r in rows]) for k in keys}
    role_calls = sum(1 for c in plan.calls if c.kind == "role")
    # Ray tasks: the runtime sends the role calls of one stage on one process as one task (StageBatch); a
    # plan whose roles all live in one process runs each whole step there in one task
    tasks = sum(len({p.process for call_id in stage.calls if plan.call(call_id).kind == "role"
                     for p in plan.placements_of(plan.call(call_id).target)}) for stage in plan.schedule)
    if per_step and per_step[-1].get("in one process"):
        tasks = 1
    return {"spec": spec, "steps": len(rows), "medians_s": medians, "role_calls_per_step": role_calls,
            "ray_tasks_per_step": tasks, "stages": len(plan.schedule)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--specs", nargs="+", default=SPECS)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)
    if args.smoke:
        args.steps, args.warmup, args.specs = 2, 0, args.specs[-1:]
    results = []
    with tempfile.TemporaryDirectory(prefix="rlgraph-bench-profile-") as tmp:
        for spec in args.specs:
            results.append(profile(spec, args.steps, args.warmup, Path(tmp) / Path(spec).stem))
            m = results[-1]["medians_s"]
            print(f"{spec}: step {m['step'] * 1000:.1f} ms = worker compute {m['worker compute'] * 1000:.1f} + ray latency "
                  f"{m['ray latency'] * 1000:.1f} + launch {m['launch'] * 1000:.1f} + driver calls {m['driver calls'] * 1000:.1f} "
                  f"+ collect {m['collect'] * 1000:.1f} + batch metrics {m['batch metrics'] * 1000:.1f} + loop "
                  f"{m['loop'] * 1000:.1f} ms (medians; {results[-1]['role_calls_per_step']} role calls per step)", flush=True)
    write_result("smoke_profile" if args.smoke else "profile", {
        "benchmark": "the step driver timed from inside (medians per step)",
        "command": "bench/profile_step.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "results": results, "machine": machine_facts()}, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
