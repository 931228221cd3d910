"""Start-up: the CLI (`rlgraph --help` next to `python -c pass`) and the time to the first step of `rlgraph run`.

    .venv/bin/python bench/bench_startup.py [--repeats 3] [--cli-repeats 10] [--smoke]

Time to first step, from outside: `rlgraph run` runs as a fresh process with PYTHONUNBUFFERED; the bench notes when each console line and each
metrics.jsonl line appears, all on one clock started just before the command:

    compile, plan,       until the first console line ("rlgraph run ... -> ..."), printed after
    runtime imports      `from rlgraph.runtime import run_plan` (torch, ray, transformers)
    imports, pre-flight, until "ray: local ...": torch/ray/transformers imports, model and data
    ray.init             checks, reward import, and starting the local Ray instance
    processes, workers,  until the step-0 line of metrics.jsonl: placement group, actor start,
    validation 0         worker build (model load) and the validation before training
    first step           until the step-1 line (timing_s/step of step 1 is the driver's part of it)

Against the floor (bench/startup_floor.py: a private `ray.init` and one actor that imports torch and
transformers, as a whole process), run alternately with the command: the ratio of the medians.

The phases the runtime hides are measured alone, as the runtime does them, in a fresh process
(`--phases` worker): importing the runtime, `ray.init` of a private local instance, starting one actor that imports torch
and transformers, and building the workers of the spec inside that actor (model load).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import NO_EXTRAS, RLGRAPH, ROOT, machine_facts, median, python_json, run_rlgraph, write_result

SPECS = ["specs/grpo_arith.rl", "specs/ppo_arith.rl"]


# --- CLI start-up ---


def time_command(command: list[str], repeats: int) -> dict[str, float]:
    subprocess.run(command, cwd=ROOT, capture_output=True)  # warm the file cache
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.decode()[-2000:]}")
    return {"median_s": median(times), "min_s": min(times), "all_s": times}


def cli_startup(repeats: int) -> dict[str, Any]:
    script = Path(sys.executable).with_name("rlgraph")  # the console script a user types
    rlgraph = [str(script)] if script.exists() else RLGRAPH
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "rlgraph --help": [*rlgraph, "--help"],
        "rlgraph run --help": [*rlgraph, "run", "--help"],
    }
    out = {name: {"command": " ".join(cmd).replace(str(ROOT) + "/", ""), **time_command(cmd, repeats)}
           for name, cmd in commands.items()}
    base = out["python -c pass"]["median_s"]
    for row in out.values():
        row["over_python_s"] = row["median_s"] - base
    return out


# --- the phases the runtime hides, measured alone (runs in its own process) ---


def phases_worker(spec: str) -> dict[str, Any]:
    import logging
    import os

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    t0 = time.perf_counter()
    import rlgraph.runtime.loop  # noqa: F401  what `rlgraph run` imports before its first line: torch, ray, ...
    import ray

    t_import = time.perf_counter()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    t_init = time.perf_counter()

    from common import step_work

    work = step_work(spec)

    class Host:
        def __init__(self) -> None:
            import torch
            import transformers  # noqa: F401

            torch.set_num_threads(1)

        def ready(self) -> int:
            return os.getpid()

        def build(self, model: str, ref: bool, critic: bool) -> float:
            start = time.perf_counter()
            from rlgraph.models import resolve_model_path
            from rlgraph.workers import CriticWorker, PolicyWorker

            from rlgraph.contract import settings as s

            # what loading costs does not depend on the settings' values: the schema's defaults
            optim = s.OptimSettings(lr=1e-6, betas=(0.9, 0.999), weight_decay=0.0, warmup_steps=0, warmup_ratio=None, grad_clip=1.0,
                        schedule="constant", min_lr_ratio=0.0, decay_steps=None)
            path = resolve_model_path(model)
            self.workers = [PolicyWorker(path, s.ActorSettings("float32", "ddp", None, None, 0.0, optim, False, None, False, False, False), seed=0)]
            if ref:
                self.workers.append(PolicyWorker(path, s.RefSettings("float32", "ddp", None, None, False, False), seed=1000))
            if critic:
                self.workers.append(CriticWorker(path, s.CriticSettings("float32", "ddp", None, None, "value", optim, False, False, False, False), seed=2000))
            return time.perf_counter() - start

    try:
        actor = ray.remote(num_cpus=1)(Host).remote()  # rlgraph is installed in the venv: no runtime_env
        ray.get(actor.ready.remote())
        t_actor = time.perf_counter()
        build_s = ray.get(actor.build.remote(work.model, work.ref, work.critic is not None))
        t_build = time.perf_counter()
    finally:
        ray.shutdown()
    return {"import_runtime_s": t_import - t0, "ray_init_s": t_init - t_import, "actor_start_s": t_actor - t_init,
            "build_workers_call_s": t_build - t_actor, "build_workers_in_process_s": build_s}


# --- time to first step ---


def floor(*flags: str) -> float:
    """bench/startup_floor.py as a whole process: ray.init of a private instance and one actor importing torch
    and transformers, the start-up no run can go below (with `--rlgraph-ray-settings`: Ray started as rlgraph
    starts it)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, str(Path(__file__).with_name("startup_floor.py")), *flags], cwd=ROOT,
                   check=True, capture_output=True)
    return time.perf_counter() - start


def ratios(runs: list[float], floors: list[float]) -> tuple[float, list[float]]:
    """The ratio of the medians, and the spread it sits in: every run against every floor."""
    return median(runs) / median(floors), [min(runs) / max(floors), max(runs) / min(floors)]


def first_step(spec: str, workdir: Path) -> dict[str, Any]:
    trace = run_rlgraph(spec, ["train.steps=2", *NO_EXTRAS], workdir / Path(spec).stem)
    by_step = {r.get("training/global_step"): (r, t) for r, t in zip(trace.records, trace.record_times)}
    t_cli = trace.line_time("rlgraph run")
    t_ray = trace.line_time("ray: ")
    step0, t0 = by_step[0]
    step1, t1 = by_step[1]
    last = trace.records[-1]
    return {
        "to_first_line_s": t_cli,  # compile + plan + writing plan.json + importing the runtime (torch, ray)
        "to_ray_ready_s": t_ray,  # + torch/ray/transformers imports, pre-flight, ray.init
        "to_step0_record_s": t0,  # + placement group, actor start, worker build, validation at step 0
        "to_step1_record_s": t1,  # + the first step
        "compile_plan_imports_s": t_cli,
        "preflight_ray_init_s": (t_ray - t_cli) if t_ray and t_cli else None,
        "processes_workers_validation_s": (t0 - t_ray) if t_ray else None,
        "validation_s_estimate": last.get("timing_s/testing"),  # the last step's validation, same val set
        "first_step_s": t1 - t0,
        "first_step_timing_s": step1.get("timing_s/step"),
        "second_step_timing_s": by_step.get(2, ({}, 0))[0].get("timing_s/step"),
        "command_wall_s": trace.wall_s,
        # what the run itself records in its step-0 line (rlgraph/runtime/loop.py)
        "recorded": {k: v for k, v in step0.items() if k.startswith("startup_s/") or k == "timing_s/testing"},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--specs", nargs="+", default=SPECS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cli-repeats", type=int, default=10)
    parser.add_argument("--smoke", action="store_true", help="the CLI part once; no rlgraph run")
    parser.add_argument("--output", default=None)
    parser.add_argument("--phases", metavar="SPEC", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phases:
        print(json.dumps(phases_worker(args.phases)))
        return 0
    if args.smoke:
        args.repeats, args.cli_repeats, args.specs = 1, 1, []

    cli = cli_startup(args.cli_repeats)
    for name, row in cli.items():
        print(f"{name:<20} {row['median_s'] * 1000:7.0f} ms")
    specs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="rlgraph-bench-startup-") as tmp:
        for spec in args.specs:
            runs, floors, quick_floors = [], [], []
            for _ in range(args.repeats):  # alternating: a drift of the machine touches all three alike
                floors.append(floor())
                runs.append(first_step(spec, Path(tmp)))
                quick_floors.append(floor("--rlgraph-ray-settings"))
            phases = [python_json([sys.executable, str(Path(__file__).resolve()), "--phases", spec])
                      for _ in range(args.repeats)]
            row = {key: median([r[key] for r in runs]) for key in runs[0] if key != "recorded"}
            row["recorded"] = {key: median([r["recorded"].get(key) for r in runs if key in r["recorded"]])
                               for key in runs[0]["recorded"]}
            row |= {f"alone_{key}": median([p[key] for p in phases]) for key in phases[0]}
            row["floor_s"] = median(floors)
            row["floor_all_s"] = floors
            row["to_step1_record_all_s"] = runs_s = [r["to_step1_record_s"] for r in runs]
            row["ratio_to_floor"], row["ratio_run_by_run"] = ratios(runs_s, floors)
            row["floor_rlgraph_ray_s"] = median(quick_floors)
            row["floor_rlgraph_ray_all_s"] = quick_floors
            row["ratio_to_floor_rlgraph_ray"], row["ratio_to_floor_rlgraph_ray_run_by_run"] = ratios(runs_s,
                                                                                                 quick_floors)
            row["runs"] = runs
            row["phases_alone"] = phases
            specs[spec] = row
            print(f"{spec}: first step record after {row['to_step1_record_s']:.1f} s "
                  f"({min(row['to_step1_record_all_s']):.1f}-{max(row['to_step1_record_all_s']):.1f}), floor "
                  f"{row['floor_s']:.1f} s ({min(floors):.1f}-{max(floors):.1f}): {row['ratio_to_floor']:.2f}x "
                  f"(run by run {row['ratio_run_by_run'][0]:.2f}-{row['ratio_run_by_run'][1]:.2f}); floor with "
                  f"rlgraph's Ray settings {row['floor_rlgraph_ray_s']:.1f} s ({min(quick_floors):.1f}-"
                  f"{max(quick_floors):.1f}): {row['ratio_to_floor_rlgraph_ray']:.2f}x "
                  f"(compile+plan+imports {row['compile_plan_imports_s']:.1f}, pre-flight+ray.init "
                  f"{row['preflight_ray_init_s']:.1f}, processes+workers+validation "
                  f"{row['processes_workers_validation_s']:.1f}, first step {row['first_step_s']:.2f}); alone: ray.init "
                  f"{row['alone_ray_init_s']:.1f}, actor start {row['alone_actor_start_s']:.1f}, "
                  f"worker build {row['alone_build_workers_in_process_s']:.1f} s", flush=True)
    write_result("smoke_startup" if args.smoke else "startup", {
        "benchmark": "CLI start-up and time to the first step of rlgraph run",
        "command": "bench/bench_startup.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "repeats": args.repeats, "cli_repeats": args.cli_repeats, "cli": cli, "first_step": specs,
        "machine": machine_facts(),
    }, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
