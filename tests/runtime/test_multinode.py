"""Multi-node on one machine: a simulated 2-node Ray cluster (in a subprocess, since this session already
holds a Ray connection), the policy pool spread over both nodes and a reward model on a pool of its own;
2 steps; every replica ran on the node and bundle the Plan gave it, data-parallel ranks are ordered by
node; then `rlgraph run --address` on that running cluster leaves it running with every CPU free."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from .helpers import REPO, fast, read_metrics

SPEC = REPO / "tests" / "runtime" / "specs" / "ppo_arith_rm.rl"


def test_two_simulated_nodes_run_every_replica_where_the_plan_put_it(arith_model, tmp_path):
    rm = tmp_path / "rm"
    overrides = ["-s", "main.nodes=2", "-s", "actor.replicas=2", "-s", f'scorer.path="{rm}"']
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run(
        [sys.executable, "-m", "tests.runtime.multinode_run", str(SPEC), str(tmp_path / "run"), "--reward-model",
         str(rm), *fast(steps=2, batch_size=16), *overrides],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])
    records = read_metrics(tmp_path / "run")
    assert [r["training/global_step"] for r in records] == [0, 1, 2]
    assert all(r["timing_s/reward"] > 0 and "critic/score/mean" in r for r in records[1:])  # rm.score ran
    assert "val/score/mean" in records[0] and "val/score/mean" in records[-1]  # validated with `exact`

    assert len(result["ray_nodes"]) == 2
    # the 2-node pool really is on 2 Ray nodes, and the separate pool has its own placement group
    assert result["node_ids"]["main/0"] != result["node_ids"]["main/1"]
    assert result["where"]["rm/0"]["placement_group"] == result["pg_ids"]["reward/0"]
    for role, replica, pool, node, device, process in result["placements"]:
        where = result["where"][process]
        assert where["node_id"] == result["node_ids"][f"{pool}/{node}"], (role, replica, where)
        assert where["placement_group"] == result["pg_ids"][f"{pool}/{node}"], (role, replica, where)
        assert where["bundle"] == device and where["node"] == node, (role, replica, where)
    # ranks ordered by node: rank r of the actor group sits on plan node r of its pool
    ranks = {p: d["rank"] for p, d in result["dp"].items() if d}
    assert ranks == {"actor/0": 0, "actor/1": 1}
    assert result["where"]["actor/0"]["node"] == 0 and result["where"]["actor/1"]["node"] == 1
    assert result["dp"]["actor/0"]["master_addr"] == result["where"]["actor/0"]["node_ip"]

    address_run = result["address_run"]
    assert address_run["returncode"] == 0, address_run["output"]
    assert "ray: remote (" in address_run["output"]
    assert address_run["alive_nodes"] == 2 and address_run["free_cpus"] == address_run["total_cpus"] == 4
