"""Issue 15, item 12: the GPU housekeeping between generation and training, and deterministic kernels.

No GPU here: `torch.cuda.empty_cache` is replaced by a recorder (a MOCK of the one call a GPU would
make); the deterministic set-up runs for real in a fresh process (it changes global torch state)."""

import subprocess
import sys

import torch

import rlgraph.workers.cuda as cuda
import rlgraph.workers.policy as policy_module
from rlgraph.runtime.roles import worker_specs
from tests.runtime.plans import grpo_plan
from tests.workers.helpers import actor_settings, generate_settings, make_items, ref_settings


def test_the_cache_is_emptied_on_a_gpu_and_nothing_is_done_on_the_cpu(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))  # MOCK: no GPU here
    assert cuda.free_cached_memory(torch.device("cpu")) is False and calls == []
    assert cuda.free_cached_memory(torch.device("cuda", 0)) is True and calls == ["empty_cache"]


def test_the_actor_hands_back_generations_memory_before_it_trains(monkeypatch, tiny_model_dir, tokenizer):
    freed = []
    monkeypatch.setattr(policy_module, "free_cached_memory", lambda device: freed.append(device))
    items = make_items(["1+1="], tokenizer)
    actor = policy_module.PolicyWorker(tiny_model_dir, actor_settings(), seed=0)
    actor.generate(items, settings=generate_settings(n=1, max_new_tokens=2), seed=0)
    assert freed == [actor.device]
    ref = policy_module.PolicyWorker(tiny_model_dir, ref_settings(), seed=0)  # frozen: no training follows
    ref.generate(items, settings=generate_settings(n=1, max_new_tokens=2), seed=0)
    assert freed == [actor.device]


def test_train_deterministic_reaches_every_worker():
    import dataclasses

    plan = grpo_plan()
    assert not any(spec.deterministic for spec in worker_specs(plan, {"actor": "/models/policy"}).values())
    plan.train = dataclasses.replace(plan.train, deterministic=True)
    assert all(spec.deterministic for spec in worker_specs(plan, {"actor": "/models/policy"}).values()
               if spec.worker != "alias")


def test_make_deterministic_sets_torch_and_cublas_up():
    code = ("import os, torch; from rlgraph.workers.cuda import make_deterministic; make_deterministic(); "
            "print(torch.are_deterministic_algorithms_enabled(), os.environ['CUBLAS_WORKSPACE_CONFIG'], "
            "torch.backends.cudnn.benchmark)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", ":4096:8", "False"]


def test_a_process_makes_its_own_gpu_current_and_nothing_else(monkeypatch):
    # the host of a tp engine sees its span's GPUs too: a call without a device must land on its own
    current = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", current.append)
    for device in (None, "cpu", torch.device("cpu")):
        cuda.make_current(device)
    assert current == []
    cuda.make_current("cuda")  # a bare cuda: the first GPU the process sees
    cuda.make_current("cuda:1")
    assert current == [torch.device("cuda", 0), torch.device("cuda", 1)]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # Ray's logical GPUs on a CPU machine
    cuda.make_current("cuda:0")
    assert len(current) == 2
