"""Issue 15, item 1: everything a worker returns crosses Ray as CPU tensors.

This machine has no GPU, so a device tensor is played by `CudaStandIn`, a tensor subclass that reports
`cuda:0` (a mock of the one thing the machine cannot have). The real workers are also run through the
process boundary and their results unpickled in a fresh process that cannot see a GPU.
"""

import pickle
import subprocess
import sys

import pytest
import torch

from rlgraph.runtime.process import DeviceProcess, HostedRole
from rlgraph.runtime.roles import worker_specs
from rlgraph.workers.batch import TENSOR_FIELDS, Rollout
from rlgraph.workers.host import to_host

from .plans import grpo_plan


class CudaStandIn(torch.Tensor):
    """MOCK of a CUDA tensor (no GPU here): says it lives on cuda:0; `.cpu()` gives a plain CPU copy."""

    @staticmethod
    def __new__(cls, data: torch.Tensor):
        return torch.Tensor._make_subclass(cls, data)

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", 0)

    def cpu(self, *args, **kwargs) -> torch.Tensor:
        return self.as_subclass(torch.Tensor).clone()


def on_gpu(x: torch.Tensor) -> torch.Tensor:
    return CudaStandIn(x)


def tensors_in(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, Rollout):
        for name in TENSOR_FIELDS + ("sample_log_probs",):
            if getattr(value, name) is not None:
                yield getattr(value, name)
    elif isinstance(value, dict):
        for v in value.values():
            yield from tensors_in(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from tensors_in(v)


def assert_host_only(value):
    found = list(tensors_in(value))
    assert found, "nothing to check"
    for t in found:
        assert type(t) is torch.Tensor and t.device.type == "cpu", (type(t), t.device)


class DeviceSideWorker:
    """A worker that forgets to move its results off its GPU (what policy.py once did with the Rollout)."""

    def __init__(self, rollout: Rollout) -> None:
        self.rollout = rollout

    def generate(self) -> Rollout:
        moved = {name: on_gpu(getattr(self.rollout, name)) for name in TENSOR_FIELDS}
        import dataclasses

        return dataclasses.replace(self.rollout, **moved, sample_log_probs=on_gpu(torch.zeros(len(self.rollout), 2)))

    def log_prob(self) -> tuple[torch.Tensor, dict]:
        return on_gpu(torch.ones(2, 3)), {"values": [on_gpu(torch.zeros(1))], "step": 3}


@pytest.fixture(scope="module")
def process(arith_model):
    specs = worker_specs(grpo_plan(), {"actor": arith_model, "ref": arith_model, "rollout": arith_model})
    proc = DeviceProcess("actor/0", 0, [HostedRole(specs[r], 0) for r in ("rollout", "actor", "ref")],
                         num_threads=torch.get_num_threads())
    proc.setup()
    return proc


def real_rollout(process) -> Rollout:
    items = [{"input_ids": process.workers["actor"].tokenizer("12+34=")["input_ids"], "ground_truth": "46"}]
    settings = grpo_plan().call("rollout.generate").settings
    rollout, _ = process.call("rollout", "generate", items, settings=settings, seed=3)
    return rollout


def test_the_process_boundary_moves_device_tensors_to_the_cpu(process):
    rollout = real_rollout(process)
    process.workers["gpu_worker"] = DeviceSideWorker(rollout)
    process.hosted["gpu_worker"] = process.hosted["actor"]
    try:
        returned, _ = process.call("gpu_worker", "generate")
        assert_host_only(returned)
        assert torch.equal(returned.responses, rollout.responses)
        out, _ = process.call("gpu_worker", "log_prob")
        assert_host_only(out)
        assert out[1]["step"] == 3
    finally:
        del process.workers["gpu_worker"], process.hosted["gpu_worker"]


def test_to_host_returns_an_all_cpu_result_as_is():
    rollout = {"a": torch.zeros(3), "b": [torch.ones(2)]}
    assert to_host(rollout) is rollout  # no copy when nothing is off the CPU


def test_real_worker_results_load_in_a_process_without_cuda(process, tmp_path):
    rollout = real_rollout(process)
    plan = grpo_plan()
    log_prob, _ = process.call("actor", "log_prob", rollout, settings=plan.call("actor.log_prob").settings)
    state, _ = process.call("actor", "state_dict")
    for result in (rollout, log_prob, state):
        assert_host_only(result)
    blob = tmp_path / "results.pkl"
    blob.write_bytes(pickle.dumps((rollout, log_prob, state)))
    code = ("import os, pickle, sys, torch; assert not torch.cuda.is_available(); "
            "r, lp, st = pickle.load(open(sys.argv[1], 'rb')); "
            "print(len(r), tuple(lp.shape), r.responses.device, len(st))")
    done = subprocess.run([sys.executable, "-c", code, str(blob)], capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr
    assert f"{len(rollout)} {tuple(log_prob.shape)} cpu {len(state)}" in done.stdout
