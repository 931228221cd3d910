"""Placement: a pool that cannot fit fails at once; one that cannot be granted fails after the timeout."""

from __future__ import annotations

import dataclasses
import time

import pytest
import ray

from rlgraph.contract import settings as s
from rlgraph.plan.model import Placement, Plan, PoolPlan, RolePlan
from rlgraph.runtime.errors import PlacementError
from rlgraph.runtime.lowering import Lowered, device_spans, lower, process_placements
from rlgraph.runtime.roles import worker_specs

from .plans import REF, ROLLOUT, grpo_plan

TRAIN = s.TrainSettings(steps=1, epochs=None, seed=0, validate_every=0, checkpoint_every=0, keep_checkpoints=1,
                        deterministic=False, max_failures=0, samples_every=0, staleness=0, loggers=("console",))


def plan_with(devices: int) -> Plan:
    return Plan(
        spec="<test>",
        pools=[PoolPlan("big", 1, devices, "cpu", None)],
        roles=[RolePlan("ref", "ref", "policy", "/m", "big", devices, 1, None, REF)],
        placements=[Placement("ref", i, "big", 0, i, [i], f"ref/{i}") for i in range(devices)],
        train=TRAIN,
    )


def tp_plan(model_path: str) -> Plan:
    """A rollout on its own 3-device pool: one replica as a tp group of devices 0-1, device 2 unused."""
    return Plan(
        spec="<test>",
        pools=[PoolPlan("gen", 1, 3, "cpu", None)],
        roles=[RolePlan("rollout", "rollout", "policy", model_path, "gen", 1, 2, None,
                        dataclasses.replace(ROLLOUT, tp=2))],
        placements=[Placement("rollout", 0, "gen", 0, 0, [0, 1], "rollout/0")],
        train=TRAIN,
    )


def test_every_process_owns_one_bundle_with_all_its_devices():
    # one device per process: bundle i is device i (the hybrid engine's colocated roles share it)
    where = process_placements(grpo_plan(actor_replicas=2))
    assert {p: (w.bundle, w.devices) for p, w in where.items()} == {"actor/0": (0, (0,)), "actor/1": (1, (1,))}
    tp = process_placements(tp_plan("/m"))["rollout/0"]
    assert (tp.bundle, tp.devices) == (0, (0, 1))


def test_a_colocated_tp_replica_spans_the_processes_of_its_devices():
    """specs/ppo_qwen7b_rm_2x8.rl: each SGLang replica (tp = 2) lives in the actor process of its first device and
    needs the GPU of the next one too; a tp group with a process of its own, and every other process, only its own."""
    from .helpers import REPO, plan_from_spec

    plan = plan_from_spec(REPO / "specs" / "ppo_qwen7b_rm_2x8.rl")
    spans = {process: span for process, span in device_spans(plan, process_placements(plan)).items() if len(span) > 1}
    assert spans == {"actor/0": ("actor/0", "actor/1"), "actor/2": ("actor/2", "actor/3"),
                     "actor/4": ("actor/4", "actor/5"), "actor/6": ("actor/6", "actor/7")}
    own = tp_plan("/m")
    assert device_spans(own, process_placements(own)) == {"rollout/0": ("rollout/0",)}


def test_a_tp_group_is_one_process_that_holds_its_devices(ray_session, arith_model):
    from .faults import UnbuiltDeviceProcess

    plan = tp_plan(arith_model)
    lowered = Lowered()
    try:
        lower(plan, worker_specs(plan, {"rollout": arith_model}), lowered, timeout_s=60,
              process_class=UnbuiltDeviceProcess)
        where = ray.get(lowered.processes["rollout/0"].where.remote())
        assert where["resources"].get("CPU") == 2.0  # both devices of the tp group, in one bundle
        assert len(lowered.processes) == 1
    finally:
        lowered.shutdown()


def test_a_pool_larger_than_any_node_fails_at_once(ray_session):
    plan = plan_with(64)
    lowered = Lowered()
    with pytest.raises(PlacementError, match=r"pool `big` node 0 needs 64 CPU on one machine"):
        lower(plan, worker_specs(plan, {"ref": "/m"}), lowered, timeout_s=60)
    assert not lowered.placement_groups


def test_a_pool_that_is_not_granted_times_out_with_what_the_cluster_has(ray_session):
    from ray.util.placement_group import placement_group, remove_placement_group

    hog = placement_group([{"CPU": 1}] * 3, strategy="STRICT_PACK")
    assert hog.wait(30)
    plan = plan_with(2)
    lowered = Lowered()
    start = time.perf_counter()
    try:
        with pytest.raises(PlacementError, match=r"pool `big` node 0: its 2 cpu device\(s\) were not granted within 2 s") as info:
            lower(plan, worker_specs(plan, {"ref": "/m"}), lowered, timeout_s=2)
        assert "free now" in str(info.value)
        assert time.perf_counter() - start < 20
    finally:
        lowered.shutdown()
        remove_placement_group(hog)
