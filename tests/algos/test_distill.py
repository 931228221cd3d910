"""On-policy distillation over whole next-token distributions (rlgraph/algos/distill.py)."""

from __future__ import annotations

import math

import pytest
import torch

from rlgraph.algos.distill import distill_loss, generalized_jsd, teacher_top_k, unpack_top_k


def test_reverse_kl_is_the_hand_computed_sum_over_the_vocabulary():
    student = torch.tensor([[[0.0, math.log(3.0)]]])  # p = (1/4, 3/4)
    teacher_logits = torch.tensor([[[0.0, 0.0]]])  # q = (1/2, 1/2)
    loss, _ = distill_loss(student, teacher_top_k(teacher_logits, None), torch.ones(1, 1))
    by_hand = 0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.75 / 0.5)
    assert loss.item() == pytest.approx(by_hand, rel=1e-6)
    forward, _ = distill_loss(student, teacher_top_k(teacher_logits, None), torch.ones(1, 1), beta=0.0)
    assert forward.item() == pytest.approx(0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75), rel=1e-6)


@pytest.mark.parametrize("beta", [0.0, 0.3, 1.0])
def test_zero_when_the_student_is_the_teacher(beta):
    logits = torch.randn(3, 5, 11, generator=torch.Generator().manual_seed(0))
    loss, metrics = distill_loss(logits, teacher_top_k(logits, None), torch.ones(3, 5), beta=beta)
    assert loss.item() == pytest.approx(0.0, abs=1e-6)
    assert metrics["actor/distill_top_k_mass"] == pytest.approx(1.0)


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_a_gradient_step_moves_the_student_towards_the_teacher(beta):
    gen = torch.Generator().manual_seed(1)
    teacher = teacher_top_k(torch.randn(2, 4, 7, generator=gen), None)
    student = torch.randn(2, 4, 7, generator=gen, requires_grad=True)
    mask = torch.ones(2, 4)
    loss, _ = distill_loss(student, teacher, mask, beta=beta)
    loss.backward()
    with torch.no_grad():
        after, _ = distill_loss(student - 0.1 * student.grad, teacher, mask, beta=beta)
    assert after.item() < loss.item()
    # the teacher's most likely token gains log-probability wherever the student under-weights it
    best = unpack_top_k(teacher)[0].argmax(-1, keepdim=True)
    assert (student.grad.gather(-1, best) < 0).float().mean() > 0.5


def test_jsd_lies_between_zero_and_log_two_and_is_symmetric_at_one_half():
    gen = torch.Generator().manual_seed(2)
    p, q = torch.log_softmax(torch.randn(6, 9, generator=gen), -1), torch.log_softmax(torch.randn(6, 9, generator=gen), -1)
    jsd = generalized_jsd(p, q, 0.5)
    assert ((jsd >= 0) & (jsd <= math.log(2) + 1e-6)).all()
    assert torch.allclose(jsd, generalized_jsd(q, p, 0.5), atol=1e-6)


def test_top_k_keeps_the_teacher_s_most_likely_tokens_and_renormalises_over_them():
    logits = torch.tensor([[[3.0, 1.0, 2.0, -1.0]]])
    log_probs, ids = unpack_top_k(teacher_top_k(logits, 2))
    assert ids.tolist() == [[[0, 2]]]
    assert torch.allclose(log_probs, torch.log_softmax(logits, -1)[..., [0, 2]])
    # a student that matches the teacher on its top-2 tokens, renormalised there, has no loss
    student = torch.tensor([[[3.0, 10.0, 2.0, 5.0]]])
    loss, metrics = distill_loss(student, teacher_top_k(logits, 2), torch.ones(1, 1))
    assert loss.item() == pytest.approx(0.0, abs=1e-6)
    assert metrics["actor/distill_top_k_mass"] < 0.1  # most of its mass sits off the teacher's tokens


def test_masked_positions_carry_no_loss_nor_gradient():
    gen = torch.Generator().manual_seed(3)
    teacher = teacher_top_k(torch.randn(1, 3, 5, generator=gen), None)
    student = torch.randn(1, 3, 5, generator=gen, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, _ = distill_loss(student, teacher, mask)
    loss.backward()
    assert not student.grad[0, 2].any()
    kept, _ = distill_loss(student[:, :2], teacher[:, :2], mask[:, :2])
    assert loss.item() == pytest.approx(kept.item(), rel=1e-6)


def test_a_teacher_with_another_vocabulary_is_refused():
    with pytest.raises(ValueError, match="share one tokenizer"):
        distill_loss(torch.zeros(1, 1, 3), teacher_top_k(torch.zeros(1, 1, 5), None), torch.ones(1, 1))
