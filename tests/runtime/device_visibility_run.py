"""Run by test_device_visibility.py in a subprocess (the test session already holds its own Ray connection):
each plan's processes started on a simulated 2-node cluster with 8 logical GPUs a node
(`ray.cluster_utils.Cluster`), one plan after the other, without building a worker (no model is loaded, no CUDA
is touched); prints one JSON line a plan: what every process sees and would use, read from inside it, with its
Ray node.

    python -m tests.runtime.device_visibility_run '[["SPEC", ["key=value", ...]], ...]'
"""

from __future__ import annotations

import json
import logging
import sys


def main(plans: list[tuple[str, list[str]]]) -> None:
    import ray
    from ray.cluster_utils import Cluster

    from rlgraph.runtime.cluster import local_only
    from rlgraph.runtime.lowering import Lowered, start_processes
    from rlgraph.runtime.process import DeviceProcess
    from rlgraph.runtime.roles import worker_specs
    from tests.runtime.helpers import plan_from_spec

    class Probe(DeviceProcess):
        def node_id(self) -> str:
            return ray.get_runtime_context().get_node_id()

    local_only()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 8, "num_gpus": 8, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=8, num_gpus=8)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.ERROR)
        for spec, overrides in plans:
            plan = plan_from_spec(spec, *overrides)
            lowered = Lowered()
            try:
                start_processes(plan, worker_specs(plan, {}), lowered, timeout_s=120, process_class=Probe)
                out = {process: {**ray.get(handle.devices.remote()), "node_id": ray.get(handle.node_id.remote())}
                       for process, handle in lowered.processes.items()}
            finally:
                lowered.shutdown()
            print("RESULT " + json.dumps({
                "processes": out, "pools": {p.name: p.device for p in plan.pools},
                "placements": [[p.role, p.replica, p.pool, p.node, p.devices, p.process] for p in plan.placements]}))
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
