"""Device selection and visibility with Ray's logical GPUs (rlgraph/runtime/lowering.py show_devices,
DeviceProcess.device): plans started on a simulated 2-node cluster with 8 logical GPUs a node (in a subprocess,
since this session already holds a Ray connection), no worker built, read from inside every process.

- specs/ppo_qwen7b_rm_2x8.rl's 16 processes: each uses its own GPU, as cuda:0; the process of each colocated
  SGLang rollout replica (tp = 2) also sees the GPU of the actor process that owns its second device; no other
  process sees more than its own. The same spec with its rollout on vLLM sees the same (vLLM's tp workers are
  processes of the rollout's own, started with what it sees).
- a GPU pool beside a cpu pool: the cpu pool's process sees no GPU and uses the CPU, although its node has GPUs
  (the raylets see all 8, as on a GPU machine, where Ray leaves a process it gives no GPU all of them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .helpers import REPO

SPEC = REPO / "specs" / "ppo_qwen7b_rm_2x8.rl"
# the reward model on a cpu pool beside the policy's GPU
MIXED = (REPO / "tests" / "runtime" / "specs" / "ppo_arith_rm.rl", ["pool.main.device=gpu", "pool.main.memory=80GiB"])


@pytest.fixture(scope="module")
def results():
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(8))  # what a GPU node's raylet sees
    plans = json.dumps([[str(SPEC), []], [str(MIXED[0]), MIXED[1]], [str(SPEC), ["rollout.engine=vllm"]]])
    done = subprocess.run([sys.executable, "-m", "tests.runtime.device_visibility_run", plans], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return [json.loads(line[7:]) for line in done.stdout.splitlines() if line.startswith("RESULT ")]


def test_every_process_sees_and_uses_the_devices_the_plan_gives_it(results):
    assert_flagship_devices(results[0])


def test_a_colocated_vllm_rollout_with_tp_sees_the_devices_of_its_span_as_sglangs(results):
    assert_flagship_devices(results[2])


def assert_flagship_devices(result: dict) -> None:
    """specs/ppo_qwen7b_rm_2x8.rl's processes, as seen from inside: see the module's docstring."""
    seen = result["processes"]
    owner = {}  # (pool, node, device) -> the process that owns it
    for role, replica, pool, node, devices, process in result["placements"]:
        if process == f"{role}/{replica}":
            owner.update({(pool, node, d): process for d in devices})
    assert set(seen) == set(owner.values()) and len(seen) == 16

    for process, inside in seen.items():
        assert len(inside["gpu_ids"]) == 1, (process, inside)  # one bundle, one GPU
        assert inside["device"] == "cuda:0", (process, inside)  # its own GPU, whatever its id on the node
        assert inside["cuda_visible_devices"].split(",")[0] == inside["gpu_ids"][0], (process, inside)
    # each Ray node: 8 processes on 8 distinct GPUs (before, every role outside a data-parallel group used GPU 0)
    by_node: dict[str, list[str]] = {}
    for inside in seen.values():
        by_node.setdefault(inside["node_id"], []).append(inside["gpu_ids"][0])
    assert len(by_node) == 2 and all(sorted(ids) == [str(i) for i in range(8)] for ids in by_node.values())
    # the plan's nodes: a pool's node 0 and node 1 are two Ray nodes, each holding all of that node's processes
    ray_node = {}
    for role, replica, pool, node, devices, process in result["placements"]:
        ray_node.setdefault((pool, node), set()).add(seen[process]["node_id"])
    assert all(len(ids) == 1 for ids in ray_node.values())
    assert all(ray_node[(pool, 0)] != ray_node[(pool, 1)] for pool, _ in ray_node)

    spanning = {}
    for role, replica, pool, node, devices, process in result["placements"]:
        if role == "rollout":
            assert len(devices) == 2  # tp = 2, hosted in its first device's process
            span = [seen[owner[(pool, node, d)]] for d in devices]
            assert {inside["node_id"] for inside in span} == {seen[process]["node_id"]}  # one node's GPUs
            spanning[process] = [inside["gpu_ids"][0] for inside in span]
    assert sorted(spanning) == ["actor/0", "actor/2", "actor/4", "actor/6"]
    for process, inside in seen.items():
        expected = spanning.get(process, inside["gpu_ids"])
        assert inside["cuda_visible_devices"] == ",".join(expected), (process, inside)


def test_a_cpu_pool_process_on_a_gpu_node_sees_no_gpu_and_uses_the_cpu(results):
    result = results[1]
    seen = result["processes"]
    assert result["pools"] == {"main": "gpu", "reward": "cpu"} and sorted(seen) == ["actor/0", "rm/0"]
    assert seen["actor/0"]["device"] == "cuda:0" and len(seen["actor/0"]["gpu_ids"]) == 1
    assert seen["actor/0"]["cuda_visible_devices"] == seen["actor/0"]["gpu_ids"][0]
    # before: device None (the workers' default, a GPU wherever torch sees one) and all 8 of the node's in view
    assert seen["rm/0"] == {**seen["rm/0"], "gpu_ids": [], "device": "cpu", "cuda_visible_devices": ""}
