"""On-policy distillation in the policy worker: a teacher's `top_k` (its next-token log-probs at every response
position of the student's samples) and the student's `distill` on them, through the update's mini-batches,
micro-batches, packing and optimizer. The math is tests/algos/test_distill.py's; here, that the positions line up."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rlgraph.contract import settings as s
from rlgraph.workers.batch import Rollout
from rlgraph.workers.policy import PolicyWorker
from tests.tolerances import FP32_REORDERED

from .helpers import actor_settings, generate_settings, make_items, ref_settings

PROMPTS = ["12+34=", "5+6=", "7=", "99+1="]


def top_k_settings(**overrides) -> s.TopKSettings:
    return dataclasses.replace(s.TopKSettings(k=None, temperature=1.0, micro_batch=None, micro_batch_tokens=None),
                               **overrides)


def distill_settings(**overrides) -> s.ActorDistillSettings:
    """`mini_batch_size` and `micro_batch` count samples."""
    return dataclasses.replace(s.ActorDistillSettings(
        epochs=1, minibatch=None, mini_batch_size=None, micro_batch=None, micro_batch_tokens=None,
        loss_agg="token-mean", beta=1.0, temperature=1.0), **overrides)


def perturbed_teacher(model_dir: str, **settings) -> PolicyWorker:
    """The tiny model with noise on every weight: a teacher whose distribution differs from the student's."""
    teacher = PolicyWorker(model_dir, ref_settings(**settings), seed=0)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in teacher.module.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=generator))
    return teacher


@pytest.fixture
def rollout(tiny_model_dir, tokenizer) -> Rollout:
    student = PolicyWorker(tiny_model_dir, actor_settings(), seed=0)
    # prompts of different lengths: left padding; responses of different lengths: right padding
    return student.generate(make_items(PROMPTS, tokenizer), settings=generate_settings(n=2, max_new_tokens=5), seed=0)


def unpadded_log_softmax(module, rollout: Rollout, row: int, temperature: float = 1.0) -> torch.Tensor:
    """Reference: the row's real tokens alone (no padding, default positions): log_softmax(logits / T) of the
    positions that predict its response tokens, float64. (response tokens of the row, vocab)"""
    keep = rollout.attention_mask[row].bool()
    tokens = rollout.input_ids[row][keep].unsqueeze(0)
    logits = module(input_ids=tokens).logits[0].double() / temperature
    length = int(rollout.response_mask[row].sum())
    return torch.log_softmax(logits[:-1], dim=-1)[-length:]


def reference_divergence(student, teacher, rollout: Rollout, beta: float, temperature: float = 1.0) -> float:
    """The token-mean divergence over every response token, each row forwarded alone, in float64."""
    total, count = 0.0, 0
    for row in range(len(rollout)):
        p_student = unpadded_log_softmax(student, rollout, row, temperature)
        p_teacher = unpadded_log_softmax(teacher, rollout, row, temperature)
        first, second = (p_student, p_teacher) if beta == 1.0 else (p_teacher, p_student)  # KL(first || second)
        total += float((first.exp() * (first - second)).sum())
        count += p_student.shape[0]
    return total / count


def test_top_k_is_the_teacher_s_distribution_at_each_response_position(tiny_model_dir, rollout):
    teacher = perturbed_teacher(tiny_model_dir)
    assert (rollout.attention_mask[:, : rollout.prompt_length] == 0).any()  # left-padded prompts
    assert not rollout.response_mask.all()  # and right-padded responses
    for temperature in (1.0, 2.0):
        full = teacher.top_k(rollout, settings=top_k_settings(temperature=temperature))  # (batch, R, V, 2)
        three = teacher.top_k(rollout, settings=top_k_settings(k=3, temperature=temperature))
        assert full.shape[:2] == rollout.responses.shape and three.shape[2:] == (3, 2)
        for row in range(len(rollout)):
            with torch.no_grad():
                expected = unpadded_log_softmax(teacher.module, rollout, row, temperature).float()  # (length, V)
            length = expected.shape[0]
            vocab = torch.arange(expected.shape[1]).float()
            torch.testing.assert_close(full[row, :length, :, 0], expected, **FP32_REORDERED)
            assert torch.equal(full[row, :length, :, 1], vocab.expand(length, -1))  # the whole vocabulary, in order
            values, ids = expected.topk(3, dim=-1)
            torch.testing.assert_close(three[row, :length, :, 0], values, **FP32_REORDERED)
            assert torch.equal(three[row, :length, :, 1].long(), ids)


@pytest.mark.parametrize("split", [{"micro_batch": 1}, {"micro_batch_tokens": 12}, {"remove_padding": True},
                                   {"remove_padding": True, "micro_batch_tokens": 12}], ids=str)
def test_top_k_does_not_depend_on_micro_batching_or_packing(tiny_model_dir, rollout, split):
    packing = {"remove_padding": split.pop("remove_padding")} if "remove_padding" in split else {}
    whole = perturbed_teacher(tiny_model_dir).top_k(rollout, settings=top_k_settings(k=4))
    parts = perturbed_teacher(tiny_model_dir, **packing).top_k(rollout, settings=top_k_settings(k=4, **split))
    mask = rollout.response_mask.bool()
    torch.testing.assert_close(parts[mask][..., 0], whole[mask][..., 0], **FP32_REORDERED)
    assert torch.equal(parts[mask][..., 1], whole[mask][..., 1])


@pytest.mark.parametrize("beta", [1.0, 0.0])
def test_distill_loss_is_the_divergence_at_every_response_token(tiny_model_dir, rollout, beta):
    """The loss of one distill call equals the reverse (beta 1) or forward (beta 0) KL from the teacher, each row
    forwarded alone: the student's and the teacher's positions line up, padding is never a position."""
    student = PolicyWorker(tiny_model_dir, actor_settings(lr=0.0), seed=0)
    teacher = perturbed_teacher(tiny_model_dir)
    temperature = 1.5
    top_k = teacher.top_k(rollout, settings=top_k_settings(temperature=temperature))
    metrics = student.distill(rollout, top_k, settings=distill_settings(beta=beta, temperature=temperature),
                              shuffle=False)
    with torch.no_grad():
        expected = reference_divergence(student.module, teacher.module, rollout, beta, temperature)
    assert expected > 0.05  # the teacher differs: a loss that ignored it would be 0
    assert metrics["actor/distill_loss"] == pytest.approx(expected, rel=1e-5)
    assert metrics["actor/distill_top_k_mass"] == pytest.approx(1.0)  # k = the whole vocabulary


def test_a_teacher_distilled_into_itself_has_no_loss_and_no_gradient(tiny_model_dir, rollout):
    student = PolicyWorker(tiny_model_dir, actor_settings(lr=1e-2), seed=0)
    itself = PolicyWorker(tiny_model_dir, ref_settings(), seed=0).top_k(rollout, settings=top_k_settings())
    other = perturbed_teacher(tiny_model_dir).top_k(rollout, settings=top_k_settings())
    same = student.distill(rollout, itself, settings=distill_settings(), shuffle=False)
    student = PolicyWorker(tiny_model_dir, actor_settings(lr=1e-2), seed=0)
    different = student.distill(rollout, other, settings=distill_settings(), shuffle=False)
    assert abs(same["actor/distill_loss"]) < 1e-6 and different["actor/distill_loss"] > 0.05
    assert same["actor/grad_norm"] < 1e-4 * different["actor/grad_norm"]


@pytest.mark.parametrize("beta", [1.0, 0.5, 0.0])
def test_distill_steps_bring_the_student_to_the_teacher(tiny_model_dir, rollout, beta):
    student = PolicyWorker(tiny_model_dir, actor_settings(lr=1e-2), seed=0)
    teacher = perturbed_teacher(tiny_model_dir)
    top_k = teacher.top_k(rollout, settings=top_k_settings())
    with torch.no_grad():
        before = reference_divergence(student.module, teacher.module, rollout, beta=1.0)
    losses = [student.distill(rollout, top_k, settings=distill_settings(beta=beta, epochs=2, mini_batch_size=4),
                              shuffle_seed=step)["actor/distill_loss"] for step in range(5)]
    with torch.no_grad():
        after = reference_divergence(student.module, teacher.module, rollout, beta=1.0)
    assert after < 0.5 * before and losses[-1] < losses[0]


def gradient_of_distill(student: PolicyWorker, rollout: Rollout, top_k: torch.Tensor,
                        **settings) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """The gradient of one `distill` call (one mini-batch: one optimizer step), as the optimizer step receives it."""
    seen: dict[str, torch.Tensor] = {}
    step = student.optim.clip_and_step

    def record() -> float:
        seen.update({name: p.grad.clone() for name, p in student.module.named_parameters()})
        return step()

    student.optim.clip_and_step = record
    try:
        metrics = student.distill(rollout, top_k, settings=distill_settings(**settings), shuffle=False)
    finally:
        student.optim.clip_and_step = step
    return seen, metrics


@pytest.mark.parametrize("split", [{"micro_batch": 1}, {"micro_batch_tokens": 12},
                                   {"micro_batch": 2, "loss_agg": "seq-mean-token-sum"}, {"remove_padding": True},
                                   {"remove_padding": True, "micro_batch_tokens": 12}], ids=str)
def test_distill_gradient_does_not_depend_on_micro_batching_or_packing(tiny_model_dir, rollout, split):
    packing = {"remove_padding": split.pop("remove_padding")} if "remove_padding" in split else {}
    agg = {"loss_agg": split.pop("loss_agg", "token-mean")}
    top_k = perturbed_teacher(tiny_model_dir).top_k(rollout, settings=top_k_settings(k=5))
    workers = [PolicyWorker(tiny_model_dir, actor_settings(lr=0.0, grad_clip=0.0, **extra), seed=0)
               for extra in ({}, packing)]
    whole, whole_metrics = gradient_of_distill(workers[0], rollout, top_k, **agg)
    parts, part_metrics = gradient_of_distill(workers[1], rollout, top_k, **agg, **split)
    assert part_metrics["actor/distill_loss"] == pytest.approx(whole_metrics["actor/distill_loss"], rel=1e-5)
    for name in whole:
        torch.testing.assert_close(parts[name], whole[name], **FP32_REORDERED, msg=lambda m: f"{name}: {m}")


def test_distill_refuses_a_teacher_scored_on_other_responses_and_a_frozen_student(tiny_model_dir, rollout):
    top_k = perturbed_teacher(tiny_model_dir).top_k(rollout, settings=top_k_settings(k=2))
    student = PolicyWorker(tiny_model_dir, actor_settings(), seed=0)
    with pytest.raises(ValueError, match="score the same responses"):
        student.distill(rollout, top_k[:, :-1], settings=distill_settings())
    with pytest.raises(RuntimeError, match="cannot train"):
        PolicyWorker(tiny_model_dir, ref_settings(), seed=0).distill(rollout, top_k, settings=distill_settings())
