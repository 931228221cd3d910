"""PolicyWorker.sft: the negative log-likelihood of the demonstrations' response tokens, through the update's
mini-batches, micro-batches and optimizer."""

from __future__ import annotations

import pytest
import torch

from rlgraph.workers.batch import demonstration_rollout
from rlgraph.workers.policy import PolicyWorker
from tests.tolerances import FP32_REORDERED

from .helpers import actor_settings, demonstration_items, sft_settings

PROMPTS = ["12+34=", "5+6=", "7+80=", "99+1="]
RESPONSES = ["46", "11", "87", "100"]


@pytest.fixture
def demos(tokenizer):
    return demonstration_rollout(demonstration_items(PROMPTS, RESPONSES, tokenizer))


def reference_nll(module, tokenizer, *, prompts_too: bool = False) -> torch.Tensor:
    """The token-mean NLL of the responses and their EOS, each row forwarded alone (no padding), with the
    prompt's positions labelled -100: the loss of verl's and TRL's SFT trainers on prompt/response rows.
    `prompts_too`: the prompt tokens labelled as well (plain language-model pre-training, what SFT is not)."""
    total, count = 0.0, 0
    for prompt, response in zip(PROMPTS, RESPONSES):
        prompt_ids = tokenizer(prompt)["input_ids"]
        answer = tokenizer(response, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        logits = module(input_ids=torch.tensor([prompt_ids + answer])).logits[0, :-1].float()  # predicts tokens 1..
        labels = torch.tensor((prompt_ids[1:] if prompts_too else [-100] * (len(prompt_ids) - 1)) + answer)
        total = total + torch.nn.functional.cross_entropy(logits, labels, ignore_index=-100, reduction="sum")
        count += int((labels != -100).sum())
    return total / count


def reference_gradient(actor: PolicyWorker, tokenizer, **kwargs) -> dict[str, torch.Tensor]:
    actor.module.zero_grad(set_to_none=True)
    reference_nll(actor.module, tokenizer, **kwargs).backward()
    grads = {name: p.grad.clone() for name, p in actor.module.named_parameters()}
    actor.module.zero_grad(set_to_none=True)
    return grads


def gradient_of_sft(actor: PolicyWorker, demos, **settings) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """The gradient of one `sft` call (one mini-batch: one optimizer step), as the optimizer step receives it."""
    seen: dict[str, torch.Tensor] = {}
    step = actor.optim.clip_and_step

    def record() -> float:
        seen.update({name: p.grad.clone() for name, p in actor.module.named_parameters()})
        return step()

    actor.optim.clip_and_step = record
    try:
        metrics = actor.sft(demos, settings=sft_settings(**settings), shuffle=False)
    finally:
        actor.optim.clip_and_step = step
    return seen, metrics


def test_sft_loss_and_gradient_come_from_the_response_tokens_alone(tiny_model_dir, tokenizer, demos):
    actor = PolicyWorker(tiny_model_dir, actor_settings(lr=0.0, grad_clip=0.0), seed=0)
    # prompts of different lengths: rows are left-padded, and some prompt tokens are in every row
    assert (demos.attention_mask[:, : demos.prompt_length] == 0).any()
    grads, metrics = gradient_of_sft(actor, demos)
    with torch.no_grad():
        assert metrics["actor/sft_loss"] == pytest.approx(reference_nll(actor.module, tokenizer).item(), rel=1e-5)
    expected = reference_gradient(actor, tokenizer)
    for name in expected:
        torch.testing.assert_close(grads[name], expected[name], **FP32_REORDERED, msg=lambda m: f"{name}: {m}")
    # a loss over the prompt tokens as well gives another gradient: the comparison above tells the two apart
    with_prompts = reference_gradient(actor, tokenizer, prompts_too=True)
    embed = "model.embed_tokens.weight"
    assert (with_prompts[embed] - grads[embed]).norm() > 0.1 * grads[embed].norm()


@pytest.mark.parametrize("split", [{"micro_batch": 1}, {"micro_batch_tokens": 12},
                                   {"micro_batch": 1, "loss_agg": "seq-mean-token-sum"}])
def test_sft_gradient_does_not_depend_on_micro_batching(tiny_model_dir, demos, split):
    actor = PolicyWorker(tiny_model_dir, actor_settings(lr=0.0, grad_clip=0.0), seed=0)
    agg = {"loss_agg": split.get("loss_agg", "token-mean")}
    whole, whole_metrics = gradient_of_sft(actor, demos, **agg)
    parts, part_metrics = gradient_of_sft(actor, demos, **split | agg)
    assert part_metrics["actor/sft_loss"] == pytest.approx(whole_metrics["actor/sft_loss"], rel=1e-5)
    for name in whole:
        torch.testing.assert_close(parts[name], whole[name], **FP32_REORDERED)


def test_sft_steps_lower_the_demonstrations_nll(tiny_model_dir, tokenizer, demos):
    actor = PolicyWorker(tiny_model_dir, actor_settings(lr=1e-2), seed=0)
    before = reference_nll(actor.module, tokenizer).item()
    losses = [actor.sft(demos, settings=sft_settings(epochs=2, mini_batch_size=2), shuffle_seed=step)["actor/sft_loss"]
              for step in range(5)]
    after = reference_nll(actor.module, tokenizer).item()
    assert after < 0.5 * before and losses[-1] < losses[0]


def test_a_reference_policy_cannot_train(tiny_model_dir, demos):
    from .helpers import ref_settings

    ref = PolicyWorker(tiny_model_dir, ref_settings(), seed=0)
    with pytest.raises(RuntimeError, match="cannot train"):
        ref.sft(demos, settings=sft_settings())


def test_sft_with_lora_trains_the_adapters_alone_and_lowers_the_nll(tiny_model_dir, tokenizer, demos):
    from rlgraph.contract.settings import LoraSettings

    lora = LoraSettings(rank=4, alpha=8.0, dropout=0.0, target_modules="all-linear")
    actor = PolicyWorker(tiny_model_dir, actor_settings(lr=1e-2, lora=lora), seed=0)
    before = {name: p.detach().clone() for name, p in actor.module.named_parameters()}
    nll = reference_nll(actor.module, tokenizer).item()
    for step in range(3):
        actor.sft(demos, settings=sft_settings(), shuffle_seed=step)
    changed = {name for name, p in actor.module.named_parameters() if not torch.equal(p, before[name])}
    assert changed and all(".lora_A." in name or ".lora_B." in name for name in changed)
    with torch.no_grad():
        assert reference_nll(actor.module, tokenizer).item() < nll


def test_sft_on_packed_rows_gives_the_padded_gradient(tiny_model_dir, demos):
    padded = PolicyWorker(tiny_model_dir, actor_settings(lr=0.0, grad_clip=0.0), seed=0)
    packed = PolicyWorker(tiny_model_dir, actor_settings(lr=0.0, grad_clip=0.0, remove_padding=True), seed=0)
    want, want_metrics = gradient_of_sft(padded, demos)
    got, got_metrics = gradient_of_sft(packed, demos, micro_batch_tokens=24)
    assert got_metrics["actor/sft_loss"] == pytest.approx(want_metrics["actor/sft_loss"], rel=1e-5)
    for name in want:
        torch.testing.assert_close(got[name], want[name], **FP32_REORDERED)
