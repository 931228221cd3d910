"""Asynchronous training (issue 14): the rollout generates ahead of the update, within train.staleness.

Runs of specs/grpo_arith_async.rl: the rollout on a CPU device of its own, synced over a collective group.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import threading
import time
from pathlib import Path

from .helpers import killed_after, fast, read_metrics
from .test_recovery import _device_processes, _steps

SPEC = "specs/grpo_arith_async.rl"
SPLIT_SPEC = "tests/runtime/specs/grpo_split.rl"  # the rollout on a CPU device of its own
COLOCATED_SPEC = "tests/runtime/specs/grpo_colocated.rl"  # the same spec, the rollout in the actor's process
SMALL = ["-s", "rollout.n=4"]


def _not_timing(record: dict) -> dict:
    return {k: v for k, v in record.items() if not k.startswith(("timing_s", "perf/time", "perf/throughput",
                                                                 "startup_s"))}


def test_staleness_zero_gives_exactly_the_synchronous_steps_results(run_cli, tmp_path):
    """The pipelined loop with staleness 0, its rollout on a pool of its own and synced over a collective group,
    makes the same calls in the same order as the synchronous step of the same spec with the rollout colocated
    (one process, weights in place): every metric and the final weights are equal, bit for bit. Both runs are
    made here, on this machine (floats from another CPU differ in the last bits)."""
    results = {}
    for name, spec in (("split", SPLIT_SPEC), ("colocated", COLOCATED_SPEC)):
        out = tmp_path / name
        code, text = run_cli(spec, "--output", out, "-s", "train.staleness=0", *fast(steps=3, batch_size=16), *SMALL)
        assert code == 0, text
        weights = (out / "checkpoints" / "step_3" / "actor" / "model.safetensors").read_bytes()
        results[name] = ([_not_timing(r) for r in read_metrics(out)], hashlib.sha256(weights).hexdigest())
    (split, split_weights), (colocated, colocated_weights) = results["split"], results["colocated"]
    assert [r["training/global_step"] for r in split] == [0, 1, 2, 3]
    assert all(r.get("async/staleness_max", 0) == 0 for r in split)
    assert split == colocated
    assert split_weights == colocated_weights


def test_staleness_never_exceeds_the_bound(run_cli, tmp_path):
    """Every sample records the version of the weights that generated it; with staleness 2 the rollout runs
    two batches ahead, so from step 3 on each batch is exactly two updates old, never more."""
    out = tmp_path / "run"
    code, text = run_cli(SPEC, "--output", out, "-s", "train.staleness=2", *fast(steps=5, batch_size=16), *SMALL)
    assert code == 0, text
    steps = [r for r in read_metrics(out) if r["training/global_step"] > 0]
    assert [r["async/staleness_max"] for r in steps] == [0, 1, 2, 2, 2]
    assert [r["async/staleness_mean"] for r in steps] == [0, 1, 2, 2, 2]  # every row of a batch alike
    assert all("timing_s/wait_for_rollout" in r for r in steps)


def test_a_resumed_async_run_neither_loses_nor_repeats_a_prompt(run_cli, tmp_path):
    """A checkpoint taken while the next batch is being generated: the resume draws that batch again (and
    generates it with the checkpoint's weights), so each step trains on the prompts it would have."""
    args = ["-s", "train.staleness=1", "-s", "train.samples_every=1", *SMALL]
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    assert run_cli(SPEC, "--output", whole, *fast(steps=4, batch_size=16, checkpoint_every=2), *args)[0] == 0
    killed_after(whole, parts, step=2)  # step 2's checkpoint was written while step 3's batch was generated
    code, text = run_cli(SPEC, "--output", parts, *fast(steps=4, batch_size=16, checkpoint_every=2), *args)
    assert code == 0 and "resuming from" in text, text
    assert _steps(parts / "metrics.jsonl") == [0, 1, 2, 3, 4]

    def prompts(run: Path) -> dict[int, list[str]]:
        rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
        by_step: dict[int, list[str]] = {}
        for row in rows:
            by_step.setdefault(row["step"], []).append(row["prompt"])
        return by_step

    assert prompts(parts) == prompts(whole)
    assert sorted(prompts(whole)) == [1, 2, 3, 4]


def test_a_dead_process_stops_both_loops_within_seconds(run_cli, tmp_path):
    """Whichever process dies (the rollout's or the actor's), the run stops with it named, not hung in a
    weight sync waiting for a peer that is gone."""
    out = tmp_path / "run"
    killed: list[tuple[int, float]] = []

    def kill_after_step_2() -> None:
        deadline = time.time() + 240
        while time.time() < deadline:
            if 2 in _steps(out / "metrics.jsonl"):
                pids = _device_processes()
                if pids:
                    os.kill(pids[-1], signal.SIGKILL)
                    killed.append((pids[-1], time.perf_counter()))
                    return
            time.sleep(0.02)

    killer = threading.Thread(target=kill_after_step_2, daemon=True)
    killer.start()
    code, text = run_cli(SPEC, "--output", out, "-s", "train.staleness=1", "-s", "train.max_failures=0",
                         *fast(steps=200, batch_size=16), *SMALL)
    ended = time.perf_counter()
    killer.join(timeout=5)
    assert killed, "the run ended before a process could be killed"
    assert code == 1
    assert "a worker process died" in text and ("`rollout`" in text or "`actor`" in text), text
    assert ended - killed[0][1] < 30, f"the run took {ended - killed[0][1]:.0f} s to stop"


def test_only_a_rollout_with_its_own_engine_on_a_trained_roles_devices_gives_its_memory_back():
    """The driver releases a rollout's device memory after each generate (and takes it back before the
    next) only where it shares devices with training and does not generate with the policy's module."""
    from rlgraph.runtime.time_share import time_shared_rollouts
    from rlgraph.runtime.roles import worker_specs

    from .helpers import SPECS, plan_from_spec

    def shared(spec, *overrides: str) -> list[str]:
        plan = plan_from_spec(spec, *overrides)
        return time_shared_rollouts(plan, worker_specs(plan, {r.name: "/nowhere" for r in plan.roles}))

    assert shared(SPECS / "grpo_arith.rl") == []  # hf in place: the actor's own module
    gpus = ("main.device=gpu", "rollout.engine=sglang")
    assert shared(SPECS / "grpo_arith.rl", *gpus) == ["rollout"]
    assert shared(SPECS / "grpo_arith_async.rl", *gpus, "gen.device=gpu") == []  # a pool of its own
