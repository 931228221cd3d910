"""bf16 trained roles keep fp32 master weights (params, grads, AdamW state) and compute in bf16; fp16 cannot train."""

import socket

import pytest
import torch

from .helpers import (actor_settings, critic_settings, critic_update_settings, forward_settings, generate_settings,
                      log_prob_settings, make_items, ref_settings, update_settings)
from rlgraph.workers.critic import CriticWorker
from rlgraph.workers.policy import PolicyWorker
from rlgraph.workers.precision import Precision

PROMPTS = ["12+34=", "5+6=", "7=", "99+1="]
LR = 1e-6  # verl's usual actor learning rate: one AdamW step moves a weight by about this much


class Watch:
    """The dtype of what `module` outputs in each forward, and whether autocast is on while gradients land."""

    def __init__(self, module: torch.nn.Module, params: list[torch.nn.Parameter]) -> None:
        self.outputs: list[torch.dtype] = []
        self.grads: list[tuple[torch.dtype, bool]] = []
        self.last_grad: dict[int, torch.Tensor] = {}
        module.register_forward_hook(lambda _m, _i, out: self.outputs.append(out.dtype))
        for p in params:
            p.register_post_accumulate_grad_hook(self._grad)

    def _grad(self, p: torch.Tensor) -> None:
        self.grads.append((p.grad.dtype, torch.is_autocast_enabled("cpu")))
        self.last_grad[id(p)] = p.grad.detach().clone()

    def take_outputs(self) -> set[torch.dtype]:
        seen, self.outputs = set(self.outputs), []
        return seen


def batch(actor, tokenizer):
    rollout = actor.generate(make_items(PROMPTS, tokenizer), settings=generate_settings(n=2, max_new_tokens=5), seed=0)
    advantages = torch.randn(rollout.responses.shape, generator=torch.Generator().manual_seed(0))
    return rollout, advantages


def adam_states(optim) -> list[torch.Tensor]:
    return [t for state in optim.optimizer.state.values() for k, t in state.items() if k in ("exp_avg", "exp_avg_sq")]


def assert_small_weights_moved_where_bf16_would_not(before: dict, after: dict, grads: dict, names: dict) -> None:
    """Weights of size ~0.02 with a gradient moved by ~lr in the fp32 masters; the same AdamW step on bf16
    weights leaves every one of them unchanged (bf16's spacing at 0.02 is 2**-13 ≈ 1.2e-4, the step 1e-6)."""
    checked = 0
    for key, grad in grads.items():
        name = names[key]
        w0, w1 = before[name], after[name]
        small = (w0.abs() > 0.0157) & (w0.abs() < 0.031) & (grad.abs() > 1e-5)  # in [2**-6, 2**-5): one spacing
        if not small.any():
            continue
        assert (w1[small] != w0[small]).all(), name
        torch.testing.assert_close((w1 - w0)[small].abs(), torch.full_like(w0[small], LR), rtol=0.05, atol=0)
        pure = w0.to(torch.bfloat16).requires_grad_()
        pure.grad = grad.to(torch.bfloat16)
        torch.optim.AdamW([pure], lr=LR, weight_decay=0.0).step()
        assert torch.equal(pure.detach()[small], w0.to(torch.bfloat16)[small]), name  # pure bf16 learns nothing
        checked += int(small.sum())
    assert checked > 100


def test_bf16_actor_trains_fp32_master_weights_and_computes_in_bf16(tiny_model_dir, tokenizer):
    actor = PolicyWorker(tiny_model_dir, actor_settings(dtype="bfloat16", lr=LR, grad_clip=None), seed=0)
    params = dict(actor.module.named_parameters())
    assert {p.dtype for p in params.values()} == {torch.float32}
    watch = Watch(actor.module.lm_head, list(params.values()))

    rollout, advantages = batch(actor, tokenizer)
    assert watch.take_outputs() == {torch.bfloat16}  # generate on the shared module runs in bf16
    old = actor.log_prob(rollout, settings=log_prob_settings())
    assert watch.take_outputs() == {torch.bfloat16} and old.dtype == torch.float32
    # the same weights in an fp32 actor compute in fp32: close, but without bf16's rounding
    exact = PolicyWorker(tiny_model_dir, actor_settings(), seed=0)
    exact_watch = Watch(exact.module.lm_head, [])
    mask = rollout.response_mask.bool()
    fp32_log_prob = exact.log_prob(rollout, settings=log_prob_settings())
    assert exact_watch.take_outputs() == {torch.float32}
    torch.testing.assert_close(old[mask], fp32_log_prob[mask], atol=0.1, rtol=0.05)
    assert not torch.equal(old[mask], fp32_log_prob[mask])

    before = actor.state_dict()
    actor.update(rollout, old, advantages, settings=update_settings(micro_batch=4))
    assert watch.take_outputs() == {torch.bfloat16}
    # gradients land in fp32, with autocast off: backward and the optimizer step run outside its context
    assert watch.grads and set(watch.grads) == {(torch.float32, False)}
    assert {t.dtype for t in adam_states(actor.optim)} == {torch.float32}
    assert {p.dtype for p in actor.module.parameters()} == {torch.float32}
    names = {id(p): name for name, p in params.items()}
    assert_small_weights_moved_where_bf16_would_not(before, actor.state_dict(), watch.last_grad, names)
    assert not torch.is_autocast_enabled("cpu")  # nothing leaks out of the worker


def test_bf16_critic_keeps_fp32_weights_and_adam_state(tiny_model_dir, tokenizer):
    policy = PolicyWorker(tiny_model_dir, ref_settings(), seed=0)
    rollout, returns = batch(policy, tokenizer)
    critic = CriticWorker(tiny_model_dir, critic_settings(dtype="bfloat16", lr=LR, grad_clip=None), seed=0)
    params = dict(critic._both().named_parameters())
    assert {p.dtype for p in params.values()} == {torch.float32}
    watch = Watch(critic.backbone.layers[-1].mlp.down_proj, list(params.values()))
    torch.nn.init.normal_(critic.value_head.weight, std=0.02)  # a zero head passes no gradient to the body

    values = critic.values(rollout, settings=forward_settings())
    assert watch.take_outputs() == {torch.bfloat16} and values.dtype == torch.float32
    before = critic.state_dict()
    critic.update(rollout, values, returns, settings=critic_update_settings())
    assert watch.take_outputs() == {torch.bfloat16}
    assert watch.grads and set(watch.grads) == {(torch.float32, False)}
    assert {t.dtype for t in adam_states(critic.optim)} == {torch.float32}
    after = critic.state_dict()
    keys = {id(p): name.removeprefix("backbone.") for name, p in params.items()}
    assert_small_weights_moved_where_bf16_would_not(before, after, watch.last_grad, keys)


def test_fp16_cannot_train_but_a_frozen_role_may_use_it(tiny_model_dir):
    with pytest.raises(ValueError, match="float16 cannot train the actor.*use bfloat16"):
        PolicyWorker(tiny_model_dir, actor_settings(dtype="float16"), seed=0)
    with pytest.raises(ValueError, match="float16 cannot train the critic.*AdamW's eps"):
        CriticWorker(tiny_model_dir, critic_settings(dtype="float16"), seed=0)
    ref = PolicyWorker(tiny_model_dir, ref_settings(dtype="float16"), seed=0)
    assert {p.dtype for p in ref.module.parameters()} == {torch.float16}


def test_precision_policies():
    from torch.distributed.fsdp import MixedPrecisionPolicy

    mixed = Precision.for_role("bfloat16", trained=True)
    assert mixed.param_dtype == torch.float32
    assert mixed.fsdp_policy() == MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    with mixed.compute(torch.device("cpu")):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    with mixed.compute(torch.device("cpu"), sharded=True):  # FSDP's policy casts; no autocast on top
        assert not torch.is_autocast_enabled("cpu")
    for plain in (Precision.for_role("float32", trained=True), Precision.for_role("bfloat16", trained=False)):
        assert plain.param_dtype == plain.dtype and plain.fsdp_policy() is None
        with plain.compute(torch.device("cpu")):
            assert not torch.is_autocast_enabled("cpu")


def test_one_rank_fsdp_shards_fp32_masters_and_computes_in_bf16(tiny_model_dir, tokenizer):
    """strategy = fsdp: the MixedPrecisionPolicy reaches fully_shard (one gloo rank, in this process)."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        actor = PolicyWorker(tiny_model_dir, actor_settings(dtype="bfloat16", lr=LR, strategy="fsdp"), seed=0)
        actor.shard()
        params = list(actor.module.parameters())
        assert all(isinstance(p, DTensor) and p.dtype == torch.float32 for p in params)
        watch = Watch(actor.module.lm_head, params)
        rollout, advantages = batch(actor, tokenizer)
        old = actor.log_prob(rollout, settings=log_prob_settings())
        assert watch.take_outputs() == {torch.bfloat16}
        assert not torch.is_autocast_enabled("cpu")
        before = {name: t.clone() for name, t in actor.state_dict().items()}  # one rank: views of the shards
        actor.update(rollout, old, advantages, settings=update_settings())
        assert {dtype for dtype, _ in watch.grads} == {torch.float32}  # reduced and kept in fp32
        assert {t.dtype for t in adam_states(actor.optim)} == {torch.float32}
        after = actor.state_dict()
        assert {t.dtype for t in after.values()} == {torch.float32}
        assert any(not torch.equal(after[name], before[name]) for name in before)
    finally:
        dist.destroy_process_group()
