"""DeviceProcess as a plain object (no Ray): it builds colocated workers and reports failures by role."""

import pytest
import torch

from rlgraph.runtime.errors import WorkerError
from rlgraph.runtime.process import DeviceProcess, HostedRole, rng_state, set_rng_state
from rlgraph.runtime.roles import worker_specs

from .plans import grpo_plan


@pytest.fixture(scope="module")
def process(arith_model):
    specs = worker_specs(grpo_plan(), {"actor": arith_model, "ref": arith_model, "rollout": arith_model})
    proc = DeviceProcess("actor/0", 0, [HostedRole(specs[r], 0) for r in ("rollout", "actor", "ref")], num_threads=torch.get_num_threads())
    proc.setup()
    return proc


def test_colocated_rollout_is_the_actor_itself(process):
    assert process.workers["rollout"] is process.workers["actor"]
    assert process.workers["ref"] is not process.workers["actor"]


def test_call_returns_the_result_and_its_time(process):
    items = [{"input_ids": process.workers["actor"].tokenizer("12+34=")["input_ids"], "ground_truth": "46"}]
    plan = grpo_plan()  # generate: n = 2, max_new_tokens = 4
    generate = plan.call("rollout.generate").settings
    rollout, seconds = process.call("rollout", "generate", items, settings=generate, seed=3)
    again, _ = process.call("rollout", "generate", items, settings=generate, seed=3)
    assert len(rollout) == 2 and seconds > 0
    assert torch.equal(rollout.responses, again.responses)  # a seed makes sampling repeatable
    log_prob, _ = process.call("ref", "log_prob", rollout, settings=plan.call("ref.log_prob").settings)
    assert log_prob.shape == rollout.responses.shape


def test_an_exception_in_a_worker_names_role_replica_node_and_keeps_its_traceback(process):
    with pytest.raises(WorkerError) as info:
        process.call("actor", "log_prob", "not a rollout", settings=grpo_plan().call("actor.log_prob").settings)
    err = info.value
    assert (err.role, err.replica, err.process) == ("actor", 0, "actor/0")
    text = str(err)
    assert "role `actor` (replica 0, node 0" in text and "AttributeError" in text
    assert "Traceback" in text and "policy.py" in text  # the worker's own frames


def test_building_a_worker_that_fails_is_a_worker_error(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    specs = worker_specs(grpo_plan(), {"actor": str(tmp_path), "ref": str(tmp_path), "rollout": str(tmp_path)})
    proc = DeviceProcess("actor/0", 0, [HostedRole(specs["actor"], 0)], num_threads=torch.get_num_threads())
    with pytest.raises(WorkerError, match=r"role `actor` \(replica 0.*building its worker"):
        proc.setup()


def test_rng_state_round_trips_through_weights_only_load(tmp_path):
    import random

    import numpy as np

    state = rng_state()
    torch.save(state, tmp_path / "rng.pt")
    expected = (torch.rand(3), random.random(), np.random.rand())
    set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    assert torch.equal(torch.rand(3), expected[0])
    assert random.random() == expected[1] and np.random.rand() == expected[2]


def test_a_process_that_has_not_used_cuda_keeps_no_cuda_rng_state_and_asks_cuda_nothing(monkeypatch):
    # on a GPU node the driver and a cpu pool's processes see GPUs they never use: asking for (or setting) the
    # CUDA RNG would open a context on the first of them, which another process uses
    asked = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    saved = torch.zeros(8, dtype=torch.uint8)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda *args: asked.append("get") or saved)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda *args: asked.append("set"))
    state = rng_state()
    assert "cuda" not in state
    set_rng_state({**state, "cuda": saved})
    assert asked == []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # a process whose workers run on its GPU
    state = rng_state()
    set_rng_state(state)
    assert "cuda" in state and asked == ["get", "set"]  # the current device's, once
