from rlgraph.plan.model import Placement, Plan, PoolPlan
from rlgraph.runtime.cluster import Resources


def test_resources_count_the_devices_of_used_pools():
    plan = Plan(
        spec="<test>",
        pools=[PoolPlan("a", 2, 4, "gpu", None), PoolPlan("b", 1, 3, "cpu", None), PoolPlan("unused", 1, 8, "cpu", None)],
        placements=[Placement("actor", 0, "a", 0, 0, [0], "actor/0"), Placement("critic", 0, "b", 0, 0, [0], "critic/0")],
    )
    # every gpu device also takes a CPU for the process that drives it
    assert Resources.of(plan) == Resources(cpus=3 + 8, gpus=8)
