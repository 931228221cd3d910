"""Run by test_multinode.py in a subprocess (the test session already holds its own Ray connection):
a simulated 2-node cluster (`ray.cluster_utils.Cluster`, 2 CPUs a node), a plan with a 2-node pool and
a separate pool, 2 training steps; then `rlgraph run --address` of the same spec on that running
cluster (1 step). Prints one JSON object: where everything ran, as seen from inside the processes, and
what the cluster looked like after the `--address` run.

    python -m tests.runtime.multinode_run SPEC RUN_DIR [--reward-model DIR] [-s key=value ...]

--reward-model DIR first writes tests.runtime.helpers.make_reward_model of the built-in model into DIR.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path


def main(spec: str, run_dir: str, overrides: list[str], reward_model: str | None = None) -> None:
    if reward_model:
        from rlgraph.models import resolve_model_path
        from tests.runtime.helpers import make_reward_model

        make_reward_model(resolve_model_path("builtin:arith-gpt"), Path(reward_model))
    import ray
    from ray.cluster_utils import Cluster

    from rlgraph.runtime.cluster import local_only
    from rlgraph.runtime.console import RunConsole
    from rlgraph.runtime.loop import Trainer
    from tests.runtime.helpers import Started, plan_from_spec

    local_only()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=2)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.ERROR)
        plan = plan_from_spec(spec, *overrides)
        with Started(plan) as started:
            lowered = started.lowered
            Path(run_dir).mkdir(parents=True, exist_ok=True)
            Trainer(plan, lowered, started.specs, started.prepared, Path(run_dir),
                    RunConsole(enabled=False)).fit(time.perf_counter())
            out = {
                "ray_nodes": [n["NodeID"] for n in ray.nodes() if n.get("Alive")],
                "node_ids": {f"{pool}/{node}": nid for (pool, node), nid in lowered.node_ids.items()},
                "pg_ids": {f"{pool}/{node}": pg.id.hex() for (pool, node), pg in lowered.placement_groups.items()},
                "where": {p: ray.get(h.where.remote()) for p, h in lowered.processes.items()},
                "dp": {p: ray.get(h.data_parallel_info.remote()) for p, h in lowered.processes.items()},
                "placements": [[p.role, p.replica, p.pool, p.node, p.device, p.process] for p in plan.placements],
            }
        # --- `rlgraph run --address`: uses the running cluster and leaves it as it found it
        import os
        import subprocess

        total = ray.cluster_resources().get("CPU")
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        overrides_1 = [x for o in overrides for x in ("-s", o)] + ["-s", "train.steps=1"]
        done = subprocess.run([sys.executable, "-m", "rlgraph.cli", "run", spec, "--output", f"{run_dir}/address",
                               "--address", cluster.address, *overrides_1], env=env, capture_output=True, text=True,
                              timeout=180)
        deadline = time.time() + 30
        while ray.available_resources().get("CPU") != total and time.time() < deadline:
            time.sleep(0.5)
        out["address_run"] = {"returncode": done.returncode, "output": (done.stdout + done.stderr)[-3000:],
                              "alive_nodes": sum(1 for n in ray.nodes() if n.get("Alive")),
                              "free_cpus": ray.available_resources().get("CPU"), "total_cpus": total}
        print("RESULT " + json.dumps(out))
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    args = sys.argv[1:]
    rm = None
    if "--reward-model" in args:
        at = args.index("--reward-model")
        rm = args[at + 1]
        del args[at:at + 2]
    main(args[0], args[1], [a for a in args[2:] if a != "-s"], rm)
