"""Weight sync and replicas: a rollout on its own process, fed the actor's weights through the object
store, samples exactly what the in-place (hybrid) rollout samples; data-parallel actor replicas split
the batch and stay identical."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rlgraph.runtime import run_plan

from .helpers import read_metrics
from .plans import grpo_plan


def final_actor(run_dir):
    from safetensors.torch import load_file

    return load_file(run_dir / "checkpoints" / "step_2" / "actor" / "model.safetensors")


@pytest.fixture(scope="module")
def hybrid(ray_session, arith_model, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("hybrid")
    run_plan(grpo_plan(), run_dir)
    return run_dir


def test_separate_rollout_matches_the_hybrid_engine_bit_for_bit(hybrid, tmp_path):
    plan = grpo_plan(rollout_pool="gen")
    rollout = plan.role("rollout")  # three sampled answers per validation prompt (`val { n = 3 }`)
    rollout.settings = dataclasses.replace(rollout.settings, val=dataclasses.replace(rollout.settings.val, n=3))
    result = run_plan(plan, tmp_path)
    assert result.steps == 2
    records = read_metrics(tmp_path)
    # every step syncs, except one right after a validation: that already synced the weights it samples with
    after_validation = [r for before, r in zip(records, records[1:]) if "val/score/mean" in before]
    assert [r["training/global_step"] for r in after_validation] == [1]
    assert all(r["timing_s/sync"] == 0 for r in after_validation)
    assert all(r["timing_s/sync"] > 0 for r in records[1:] if r not in after_validation)
    assert all(r["timing_s/update_weights"] == r["timing_s/sync"] for r in records[1:])
    assert all(r["timing_s/sync"] == 0 for r in read_metrics(hybrid)[1:])
    a, b = final_actor(hybrid), final_actor(tmp_path)
    assert all(torch.equal(a[k], b[k]) for k in a)
    last = records[-1]
    assert 0 <= last["val/score/mean@3"] <= last["val/score/best@3"] <= 1


def test_replicas_split_the_batch_and_data_parallel_actors_stay_identical(ray_session, arith_model, tmp_path):
    """2 actor replicas (a gloo all-reduce of their gradients), each generating its half of the prompts."""
    import time

    import ray

    from rlgraph.runtime.lowering import Lowered, lower
    from rlgraph.runtime.loop import Trainer
    from rlgraph.runtime.preflight import preflight
    from rlgraph.runtime.roles import worker_specs

    plan = grpo_plan(actor_replicas=2)
    prepared = preflight(plan, starting_locally=False)
    specs = worker_specs(plan, prepared.model_paths)
    lowered = Lowered()
    try:
        lower(plan, specs, lowered, timeout_s=60)
        Trainer(plan, lowered, specs, prepared, tmp_path, _quiet()).fit(time.perf_counter())
        states = [ray.get(m.handle.call.remote("actor", "state_dict"))[0] for m in lowered.groups["actor"].members]
    finally:
        lowered.shutdown()
    start = final_actor_at(arith_model)
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])  # the replicas agree...
    assert any(not torch.equal(states[0][k], start[k]) for k in start)  # ...and they did learn
    last = read_metrics(tmp_path)[-1]
    assert last["perf/total_num_tokens"] > 0 and last["timing_s/gen"] > 0


def final_actor_at(folder):
    from pathlib import Path

    from safetensors.torch import load_file

    return load_file(Path(folder) / "model.safetensors")


def _quiet():
    from rlgraph.runtime.console import RunConsole

    return RunConsole(enabled=False)
