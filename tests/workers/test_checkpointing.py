"""gradient_checkpointing: each transformer block runs again in backward, in the eval mode the workers keep.

A block's recomputation is seen as a second call of its MLP per forward-backward (a forward pre-hook:
recomputation stops once the last tensor backward needs is back, before the MLP's forward returns).
"""

from __future__ import annotations

import socket

import pytest
import torch

from rlgraph.workers import CriticWorker, PolicyWorker
from rlgraph.workers.activations import transformer_blocks

from .helpers import (actor_settings, critic_settings, critic_update_settings, forward_settings, generate_settings,
                      log_prob_settings, make_items, update_settings)
from tests.tolerances import FP32_AFTER_UPDATE

PROMPTS = ["12+34=", "5+6=", "7=", "99+1="]


class MlpCalls:
    """How many times each block's MLP has run."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.counts = [0] * len(transformer_blocks(module))
        for i, block in enumerate(transformer_blocks(module)):
            block.mlp.register_forward_pre_hook(lambda *_, i=i: self.counts.__setitem__(i, self.counts[i] + 1))

    def take(self) -> list[int]:
        counts, self.counts = self.counts, [0] * len(self.counts)
        return counts


def loss_backward(module: torch.nn.Module, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
    module.zero_grad()
    module(input_ids=input_ids, use_cache=False).logits.float().pow(2).mean().backward()
    return {name: p.grad.clone() for name, p in module.named_parameters()}


@pytest.mark.filterwarnings("ignore:.*gradient_checkpointing_enable.*deprecated:FutureWarning")
def test_hf_gradient_checkpointing_enable_alone_does_not_engage_in_eval_mode(tiny_model_dir):
    """The trap: HF checkpoints only while module.training is True; the workers keep eval() (no dropout)."""
    from transformers import AutoModelForCausalLM

    module = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    calls = MlpCalls(module)
    input_ids = torch.randint(3, 15, (2, 6), generator=torch.Generator().manual_seed(0))
    module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    module.eval()
    loss_backward(module, input_ids)
    assert calls.take() == [1, 1]  # no block ran again: nothing was checkpointed
    module.train()
    loss_backward(module, input_ids)
    assert calls.take() == [2, 2]  # what it does in train mode, where dropout would be on


def batch(worker: PolicyWorker, tokenizer):
    rollout = worker.generate(make_items(PROMPTS, tokenizer), settings=generate_settings(n=2, max_new_tokens=5),
                              seed=3)
    advantages = torch.randn(len(rollout), rollout.response_length, generator=torch.Generator().manual_seed(0))
    return rollout, advantages


def test_actor_recomputes_every_block_in_backward_and_makes_the_same_update(tiny_model_dir, tokenizer):
    plain = PolicyWorker(tiny_model_dir, actor_settings(lr=1e-2), seed=0)
    checkpointed = PolicyWorker(tiny_model_dir, actor_settings(lr=1e-2, gradient_checkpointing=True), seed=0)
    assert checkpointed.module.training is False
    # the same parameter names, so weight sync, save and load see the model they always did
    assert list(checkpointed.module.state_dict()) == list(plain.module.state_dict())
    assert [n for n, _ in checkpointed.module.named_parameters()] == [n for n, _ in plain.module.named_parameters()]
    rollout, advantages = batch(plain, tokenizer)
    # generation (KV cache) and scoring run no_grad: the blocks run as before, once per pass
    assert torch.equal(batch(checkpointed, tokenizer)[0].responses, rollout.responses)
    calls = MlpCalls(checkpointed.module)
    old = checkpointed.log_prob(rollout, settings=log_prob_settings())
    assert calls.take() == [1, 1]
    torch.testing.assert_close(old, plain.log_prob(rollout, settings=log_prob_settings()), rtol=0, atol=0)

    settings = update_settings(mini_batch_size=4, entropy_coeff=0.01)  # two optimizer steps
    metrics = checkpointed.update(rollout, old, advantages, settings=settings, shuffle=False)
    assert calls.take() == [4, 4]  # two micro-batches, each block forward then again in backward
    expected = plain.update(rollout, old, advantages, settings=settings, shuffle=False)
    assert metrics == expected
    after, expected_after = checkpointed.state_dict(), plain.state_dict()
    for name, value in expected_after.items():
        torch.testing.assert_close(after[name], value, rtol=0, atol=0)


def test_critic_recomputes_every_block_in_backward_and_makes_the_same_update(tiny_model_dir, tokenizer):
    actor = PolicyWorker(tiny_model_dir, actor_settings(), seed=0)
    rollout, returns = batch(actor, tokenizer)
    workers = [CriticWorker(tiny_model_dir, critic_settings(lr=1e-2, gradient_checkpointing=on), seed=0)
               for on in (False, True)]
    calls = MlpCalls(workers[1].backbone)
    results = []
    for worker in workers:
        torch.nn.init.normal_(worker.value_head.weight, generator=torch.Generator().manual_seed(0))
        values = worker.values(rollout, settings=forward_settings())
        metrics = worker.update(rollout, values, returns, settings=critic_update_settings(), shuffle=False)
        results.append((metrics, worker.state_dict()))
    assert calls.take() == [1 + 2, 1 + 2]  # values (no grad), then the update's forward and its recomputation
    (plain_metrics, plain_state), (metrics, state) = results
    assert metrics == plain_metrics
    for name, value in plain_state.items():
        torch.testing.assert_close(state[name], value, rtol=0, atol=0)


def test_checkpointing_composes_with_fsdp_applied_after_it(tiny_model_dir, tokenizer):
    """fully_shard wraps the checkpointed blocks (one gloo rank, in this process): same update, still recomputed."""
    import torch.distributed as dist
    from torch.distributed.fsdp import FSDPModule

    plain = PolicyWorker(tiny_model_dir, actor_settings(lr=1e-2), seed=0)
    rollout, advantages = batch(plain, tokenizer)
    old = plain.log_prob(rollout, settings=log_prob_settings())
    plain.update(rollout, old, advantages, settings=update_settings(), shuffle=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        actor = PolicyWorker(tiny_model_dir, actor_settings(lr=1e-2, strategy="fsdp", gradient_checkpointing=True),
                             seed=0)
        actor.shard()
        assert all(isinstance(block, FSDPModule) for block in transformer_blocks(actor.module))
        calls = MlpCalls(actor.module)
        actor.update(rollout, old, advantages, settings=update_settings(), shuffle=False)
        assert calls.take() == [2, 2]
        state = actor.state_dict()
        assert list(state) == list(plain.state_dict())
        for name, value in plain.state_dict().items():
            torch.testing.assert_close(state[name], value, **FP32_AFTER_UPDATE)
    finally:
        dist.destroy_process_group()
