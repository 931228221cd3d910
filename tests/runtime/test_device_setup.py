"""Per-process device set-up: the GPU index a Ray actor must use, the data-parallel group's timeouts (a short
rendezvous, generous collectives), and optimizer state that loads on a machine without the GPU that wrote it."""

import time

import pytest
import ray
import torch

from rlgraph.runtime.errors import WorkerError
from rlgraph.runtime.lowering import COLLECTIVE_TIMEOUT_S, Lowered, data_parallel_groups, join_data_parallel_groups
from rlgraph.runtime.process import DeviceProcess, HostedRole, visible_device_index
from rlgraph.runtime.roles import worker_specs

from .plans import grpo_plan


@pytest.mark.parametrize("gpu_ids, visible, index", [
    (["3"], "3", 0),  # Ray's usual layout: one GPU per actor, CUDA_VISIBLE_DEVICES set to it
    ([5], "5", 0),  # older Ray gives ints
    (["6", "7"], "6,7", 0),  # a tp group of two: its first GPU
    (["5"], "4,5,6", 1),  # a process that sees more than its own
    (["2"], None, 2),  # RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES: the node's numbering
    (["GPU-1f2e"], "GPU-0a0a,GPU-1f2e", 1),  # UUIDs
])
def test_visible_device_index(gpu_ids, visible, index):
    assert visible_device_index(gpu_ids, visible) == index


def test_visible_device_index_says_what_is_wrong():
    with pytest.raises(RuntimeError, match="no GPU from Ray"):
        visible_device_index([], "0")
    with pytest.raises(RuntimeError, match="GPU 7, which is not in CUDA_VISIBLE_DEVICES"):
        visible_device_index(["7"], "0,1")


def test_a_group_gets_the_collective_timeout_and_a_rank_per_replica(ray_session):
    plan = grpo_plan(actor_replicas=2)
    (group,) = data_parallel_groups(plan)
    remote = ray.remote(DeviceProcess).options(num_cpus=0)
    lowered = Lowered(processes={p: remote.remote(p, 0, [], 1) for p in group})
    try:
        join_data_parallel_groups(plan, lowered, {p.name: p for p in plan.pools}, 30.0)
        infos = ray.get([lowered.processes[p].data_parallel_info.remote() for p in group])
    finally:
        lowered.shutdown()
    assert [i["rank"] for i in infos] == [0, 1] and {i["backend"] for i in infos} == {"gloo"}
    assert [i["local_rank"] for i in infos] == ["0", "1"]  # cpu: the device on the node
    assert {i["timeout_s"] for i in infos} == {COLLECTIVE_TIMEOUT_S} and COLLECTIVE_TIMEOUT_S >= 600


def test_a_rank_whose_peers_never_come_fails_after_the_rendezvous_timeout(monkeypatch):
    import socket

    for key in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)  # put back afterwards: init_data_parallel sets them
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = DeviceProcess("actor/0", 0, [], num_threads=1)
    start = time.monotonic()
    with pytest.raises(WorkerError, match="joining its data-parallel group"):
        process.init_data_parallel("gloo", "127.0.0.1", port, 0, 2, 0, rendezvous_timeout_s=2,
                                   collective_timeout_s=COLLECTIVE_TIMEOUT_S)
    assert time.monotonic() - start < 60
    assert not torch.distributed.is_initialized()


def test_optimizer_state_written_on_a_gpu_loads_on_a_machine_without_one(arith_model, tmp_path, monkeypatch):
    specs = worker_specs(grpo_plan(), {"actor": arith_model, "ref": arith_model, "rollout": arith_model})
    writer = DeviceProcess("actor/0", 0, [HostedRole(specs["actor"], 0)], num_threads=1)
    writer.setup()
    actor = writer.workers["actor"]
    for p in actor.optim.params:
        p.grad = torch.full_like(p, 1e-3)
    actor.optim.optimizer.step()  # AdamW's moments: tensors to save
    state = actor.optimizer_state()
    file = tmp_path / "actor.pt"
    with monkeypatch.context() as patch:  # what torch.save writes for tensors that live on cuda:0
        patch.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
        torch.save(state, file)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(file, weights_only=True)

    reader = DeviceProcess("actor/0", 0, [HostedRole(specs["actor"], 0)], num_threads=1)
    reader.setup()
    reader.load_optimizer("actor", str(file))
    loaded = reader.workers["actor"].optim.optimizer.state_dict()["state"]
    assert loaded.keys() == state["optimizer"]["state"].keys()
    for key, moments in state["optimizer"]["state"].items():
        for name, value in moments.items():
            assert torch.equal(loaded[key][name], value) and loaded[key][name].device.type == "cpu", (key, name)
