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


def test_a_local_instance_runs_its_workers_at_the_drivers_priority(tmp_path):
    # Ray's own default is nice 15, where any busy process beside a run takes nearly all the CPU from its
    # workers; the instance `rlgraph run` starts keeps them at the driver's. A fresh process, so that it is
    # rlgraph that starts the instance, without the test session's RAY_worker_niceness (tests/conftest.py).
    import json
    import os
    import subprocess
    import sys

    script = tmp_path / "nice.py"
    script.write_text(
        "import json, os, ray\n"
        "from rlgraph.plan.model import Placement, Plan, PoolPlan\n"
        "from rlgraph.runtime.cluster import ray_cluster\n"
        "plan = Plan(spec='<test>', pools=[PoolPlan('main', 1, 1, 'cpu', None)],\n"
        "            placements=[Placement('actor', 0, 'main', 0, 0, [0], 'actor/0')])\n"
        "with ray_cluster(plan):\n"
        "    niceness = ray.get(ray.remote(lambda: os.nice(0)).remote())\n"
        "print(json.dumps({'driver': os.nice(0), 'worker': niceness}))\n")
    env = {k: v for k, v in os.environ.items() if k != "RAY_worker_niceness"}
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=180,
                         cwd=os.getcwd())
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["worker"] == seen["driver"], seen
