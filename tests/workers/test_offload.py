"""Offload (workers/offload.py): state kept in host memory, moved to the device only when a call needs it.

On this CPU-only machine host and device are the same memory, so where a test must see a move it gives the
host a label of its own: the meta device, which holds no data (a one-way move: what lands there is only
checked for where it is). The FSDP2 CPU offload policy runs for real here, on a one-rank gloo group.
"""

from __future__ import annotations

import io
import socket

import pytest
import torch

from rlgraph.workers import CriticWorker, PolicyWorker
from rlgraph.workers.optim import Optimization

from .helpers import (actor_settings, critic_settings, critic_update_settings, forward_settings, generate_settings,
                      log_prob_settings, make_items, ref_settings, update_settings)

PROMPTS = ["12+34=", "5+6=", "7=", "99+1="]
META = torch.device("meta")


def batch(worker: PolicyWorker, tokenizer):
    rollout = worker.generate(make_items(PROMPTS, tokenizer), settings=generate_settings(n=2, max_new_tokens=5),
                              seed=3)
    advantages = torch.randn(len(rollout), rollout.response_length, generator=torch.Generator().manual_seed(0))
    return rollout, advantages


def adam_moments(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [v for state in optimizer.state.values() for k, v in state.items() if k != "step"]


def through_a_file(state: dict) -> dict:
    """As a checkpoint holds it: no tensor shared with the worker that saved it."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert list(a) == list(b)
    for name, value in a.items():
        torch.testing.assert_close(b[name], value, rtol=0, atol=0)


# --- optimizer_offload --------------------------------------------------------------------------


def test_adam_state_goes_to_the_host_after_each_step_and_the_step_counts_stay():
    layer = torch.nn.Linear(4, 3)
    optim = Optimization(layer.parameters(), lr=0.1, betas=(0.9, 0.999), weight_decay=0.0, grad_clip=1.0,
                         warmup_steps=0, state_host=META)
    seen = []  # where m and v were while AdamW stepped: beside the parameters
    optim.optimizer.register_step_post_hook(lambda opt, *_: seen.extend(t.device for t in adam_moments(opt)))
    layer(torch.ones(2, 4)).sum().backward()
    assert optim.clip_and_step() > 0
    assert seen and set(seen) == {torch.device("cpu")}
    assert len(adam_moments(optim.optimizer)) == 4 and all(t.is_meta for t in adam_moments(optim.optimizer))
    steps = [state["step"] for state in optim.optimizer.state.values()]
    assert all(not s.is_meta and float(s) == 1.0 for s in steps)


def test_optimizer_offload_makes_the_same_updates_and_resumes_exactly(tiny_model_dir, tokenizer):
    plain = PolicyWorker(tiny_model_dir, actor_settings(lr=1e-2), seed=0)
    offloaded = PolicyWorker(tiny_model_dir, actor_settings(lr=1e-2, optimizer_offload=True), seed=0)
    assert offloaded.optim.state_host == torch.device("cpu") and plain.optim.state_host is None
    rollout, advantages = batch(plain, tokenizer)
    old = plain.log_prob(rollout, settings=log_prob_settings())
    for worker in (plain, offloaded):
        for _ in range(2):
            worker.update(rollout, old, advantages, settings=update_settings(), shuffle=False)
    assert_same(plain.state_dict(), offloaded.state_dict())
    saved = through_a_file(offloaded.optimizer_state())
    assert_same(dict(enumerate(adam_moments(plain.optim.optimizer))),
                dict(enumerate(adam_moments(offloaded.optim.optimizer))))

    # resume: a new worker loads the weights and the state, then steps as the first one goes on to
    resumed = PolicyWorker(tiny_model_dir, actor_settings(lr=1e-2, optimizer_offload=True), seed=0)
    resumed.load_state_dict(offloaded.state_dict())
    resumed.optim.state_host = META  # a host of its own: a loaded state arrives beside the parameters, then goes there
    resumed.load_optimizer_state(saved)
    assert len(adam_moments(resumed.optim.optimizer)) > 0
    assert all(t.is_meta for t in adam_moments(resumed.optim.optimizer))
    resumed.optim.state_host = torch.device("cpu")
    resumed.load_optimizer_state(saved)
    for worker in (offloaded, resumed):
        worker.update(rollout, old, advantages, settings=update_settings(), shuffle=False)
    assert_same(offloaded.state_dict(), resumed.state_dict())


def test_optimizer_offload_of_the_critic(tiny_model_dir, tokenizer):
    actor = PolicyWorker(tiny_model_dir, actor_settings(), seed=0)
    rollout, _ = batch(actor, tokenizer)
    returns = torch.randn(len(rollout), rollout.response_length, generator=torch.Generator().manual_seed(1))
    states = []
    for on in (False, True):
        critic = CriticWorker(tiny_model_dir, critic_settings(lr=1e-2, optimizer_offload=on), seed=0)
        values = critic.values(rollout, settings=forward_settings())
        critic.update(rollout, values, returns, settings=critic_update_settings(), shuffle=False)
        states.append(critic.state_dict())
    assert_same(*states)


# --- a ref's param_offload ----------------------------------------------------------------------


def test_ref_weights_are_on_the_device_for_log_prob_and_on_the_host_after(tiny_model_dir, tokenizer):
    actor = PolicyWorker(tiny_model_dir, actor_settings(), seed=0)
    rollout, _ = batch(actor, tokenizer)
    plain = PolicyWorker(tiny_model_dir, ref_settings(), seed=0)
    ref = PolicyWorker(tiny_model_dir, ref_settings(param_offload=True), seed=0)
    assert plain.offload_host is None and ref.offload_host == torch.device("cpu")
    assert all(p.device == torch.device("cpu") for p in ref.module.parameters())  # loaded onto the host
    expected = plain.log_prob(rollout, settings=log_prob_settings())
    torch.testing.assert_close(ref.log_prob(rollout, settings=log_prob_settings()), expected, rtol=0, atol=0)

    ref.offload_host = META  # a host of its own, to see the move back
    during = []
    ref.module.register_forward_pre_hook(lambda module, _: during.append({p.device for p in module.parameters()}))
    torch.testing.assert_close(ref.log_prob(rollout, settings=log_prob_settings()), expected, rtol=0, atol=0)
    assert during == [{ref.device}]
    assert all(t.is_meta for t in [*ref.module.parameters(), *ref.module.buffers()])


# --- param_offload of a sharded role: FSDP2's CPUOffloadPolicy -----------------------------------


@pytest.fixture
def one_rank_group():
    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def offload_policies(module: torch.nn.Module) -> list[str]:
    from torch.distributed.fsdp import FSDPModule

    return [type(part._get_fsdp_state()._fsdp_param_group.offload_policy).__name__
            for part in module.modules() if isinstance(part, FSDPModule)]


def test_sharded_param_offload_uses_the_cpu_offload_policy_and_trains_the_same(tiny_model_dir, tokenizer,
                                                                              one_rank_group):
    plain = PolicyWorker(tiny_model_dir, actor_settings(lr=1e-2, strategy="fsdp"), seed=0)
    offloaded = PolicyWorker(tiny_model_dir, actor_settings(lr=1e-2, strategy="fsdp", param_offload=True), seed=0)
    for worker in (plain, offloaded):
        worker.shard()
    # the embeddings and head (root), and each of the 2 blocks
    assert offload_policies(offloaded.module) == ["CPUOffloadPolicy"] * 3
    assert offload_policies(plain.module) == ["OffloadPolicy"] * 3
    rollout, advantages = batch(plain, tokenizer)
    assert torch.equal(offloaded.generate(make_items(PROMPTS, tokenizer), settings=generate_settings(
        n=2, max_new_tokens=5), seed=3).responses, rollout.responses)
    old = plain.log_prob(rollout, settings=log_prob_settings())
    torch.testing.assert_close(offloaded.log_prob(rollout, settings=log_prob_settings()), old, rtol=0, atol=0)
    for worker in (plain, offloaded):
        for _ in range(2):
            worker.update(rollout, old, advantages, settings=update_settings(), shuffle=False)
    assert_same(plain.state_dict(), offloaded.state_dict())
    saved = through_a_file(offloaded.optimizer_state())
    assert saved["optimizer"]["state"], "the gathered AdamW state is empty"

    # resume from the gathered state: the next update is the one the first worker makes
    resumed = PolicyWorker(tiny_model_dir, actor_settings(lr=1e-2, strategy="fsdp", param_offload=True), seed=0)
    resumed.shard()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    set_model_state_dict(resumed.module, offloaded.state_dict(), options=StateDictOptions(full_state_dict=True))
    resumed.load_optimizer_state(saved)
    for worker in (offloaded, resumed):
        worker.update(rollout, old, advantages, settings=update_settings(), shuffle=False)
    assert_same(offloaded.state_dict(), resumed.state_dict())


def test_sharded_critic_and_ref_take_the_cpu_offload_policy(tiny_model_dir, one_rank_group):
    critic = CriticWorker(tiny_model_dir, critic_settings(strategy="fsdp", param_offload=True), seed=0)
    critic.shard()
    assert set(offload_policies(critic.backbone)) == set(offload_policies(critic.value_head)) == {"CPUOffloadPolicy"}
    ref = PolicyWorker(tiny_model_dir, ref_settings(strategy="fsdp", param_offload=True), seed=0)
    ref.shard()
    assert ref.offload_host is None  # the policy moves the shards: no move of the whole module around calls
    assert set(offload_policies(ref.module)) == {"CPUOffloadPolicy"}
