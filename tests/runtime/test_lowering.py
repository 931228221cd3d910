"""Placement: a pool that cannot fit fails at once; one that cannot be granted fails after the timeout."""

from __future__ import annotations

import time

import pytest

from rlgraph.plan.model import Placement, Plan, PoolPlan, RolePlan
from rlgraph.runtime.errors import PlacementError
from rlgraph.runtime.lowering import Lowered, lower
from rlgraph.runtime.roles import worker_specs


def plan_with(devices: int) -> Plan:
    return Plan(
        spec="<test>",
        pools=[PoolPlan("big", 1, devices, "cpu", None)],
        roles=[RolePlan("ref", "ref", "policy", "/m", devices, 1, None, {})],
        placements=[Placement("ref", i, "big", 0, i, [i], f"ref/{i}") for i in range(devices)],
    )


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
