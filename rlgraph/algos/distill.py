"""On-policy distillation with the teacher's whole next-token distribution (GKD, Agarwal et al. 2024).

`distill_advantage` (rlgraph/algos/advantages.py) scores only the token the student sampled: one noisy draw of
the reverse KL per position. Here the divergence between the student's and the teacher's next-token
distributions is taken in full at every sampled position, an exact per-position value with a dense gradient
over the vocabulary (TRL's GKDTrainer `generalized_jsd_loss`; Thinking Machines' and NeMo-RL's top-k logit
distillation when the vocabulary is large).

The teacher's side travels as its top-k log-probs and their token ids, one float32 tensor (batch, R, k, 2):
[..., 0] the log-probs, [..., 1] the ids (exact in float32 below 2^24, far above any vocabulary). With k the
whole vocabulary it is the full distribution; with fewer, both distributions are renormalised over the
teacher's k tokens, the support where the teacher puts its mass.
"""

from __future__ import annotations

import math

import torch

from rlgraph.algos.core import agg_loss, masked_mean, zero_masked


def pack_top_k(log_probs: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """(batch, R, k) log-probs and token ids -> the one tensor a teacher's call returns, (batch, R, k, 2)."""
    return torch.stack((log_probs.float(), ids.float()), dim=-1)


def unpack_top_k(top_k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The inverse of `pack_top_k`: (log-probs (batch, R, k) float32, ids (batch, R, k) int64)."""
    return top_k[..., 0], top_k[..., 1].long()


def teacher_top_k(logits: torch.Tensor, k: int | None, temperature: float = 1.0) -> torch.Tensor:
    """The teacher's k most likely next tokens at each position, packed: (batch, R, k, 2). `k` None or at
    least the vocabulary: all of it, in vocabulary order."""
    log_probs = torch.log_softmax(logits.float() / temperature, dim=-1)  # (batch, R, V)
    vocab = log_probs.shape[-1]
    if k is None or k >= vocab:
        ids = torch.arange(vocab, device=log_probs.device).expand_as(log_probs)
        return pack_top_k(log_probs, ids)
    values, ids = log_probs.topk(k, dim=-1)  # (batch, R, k) each
    return pack_top_k(values, ids)


def generalized_jsd(student_log_probs: torch.Tensor, teacher_log_probs: torch.Tensor, beta: float) -> torch.Tensor:
    """Per-position divergence over the last dim of two log-distributions, (...) from (..., V).

    beta = 1: the reverse KL(student || teacher), the mode-seeking one on-policy distillation minimises;
    beta = 0: the forward KL(teacher || student); between: the generalized Jensen-Shannon divergence
    beta * KL(teacher || M) + (1 - beta) * KL(student || M), M = beta * teacher + (1 - beta) * student
    (TRL's GKD convention for beta).
    """
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta must be in [0, 1] (1 = reverse KL, 0 = forward KL), got {beta}")

    def kl(p_log: torch.Tensor, q_log: torch.Tensor) -> torch.Tensor:  # KL(p || q); log-probs are finite
        return (p_log.exp() * (p_log - q_log)).sum(-1)

    if beta == 1.0:
        return kl(student_log_probs, teacher_log_probs)
    if beta == 0.0:
        return kl(teacher_log_probs, student_log_probs)
    mixture = torch.logsumexp(torch.stack((teacher_log_probs + math.log(beta),
                                           student_log_probs + math.log(1.0 - beta))), dim=0)
    return beta * kl(teacher_log_probs, mixture) + (1.0 - beta) * kl(student_log_probs, mixture)


def distill_loss(student_logits: torch.Tensor, teacher: torch.Tensor, response_mask: torch.Tensor, *,
                 beta: float = 1.0, temperature: float = 1.0,
                 agg: str = "token-mean") -> tuple[torch.Tensor, dict[str, float]]:
    """The student's divergence from the teacher at each response position, aggregated as a policy loss is.

    `student_logits` (batch, R, V) raw, the ones that predict each response token; `teacher` (batch, R, k, 2)
    from `teacher_top_k`. The teacher is a constant (no gradient reaches it). Metrics: the loss, and the
    student's share of probability on the teacher's k tokens (1 when k is the whole vocabulary).
    """
    teacher_log_probs, ids = unpack_top_k(teacher.detach())
    if ids.numel() and int(ids.max()) >= student_logits.shape[-1]:
        raise ValueError(f"the teacher names token id {int(ids.max())}, but the student's vocabulary has "
                         f"{student_logits.shape[-1]} tokens: teacher and student must share one tokenizer")
    student_all = torch.log_softmax(student_logits.float() / temperature, dim=-1)  # (batch, R, V)
    student_on_k = student_all.gather(-1, ids)  # (batch, R, k)
    covered = torch.logsumexp(student_on_k, dim=-1)  # log of the student's mass on the teacher's tokens
    full = ids.shape[-1] == student_logits.shape[-1]
    # over the teacher's k tokens, both renormalised there (a no-op when k is the whole vocabulary)
    student_k = student_on_k if full else student_on_k - covered.unsqueeze(-1)
    teacher_k = teacher_log_probs if full else teacher_log_probs - torch.logsumexp(teacher_log_probs, -1, True)
    divergence = zero_masked(generalized_jsd(student_k, teacher_k, beta), response_mask)  # (batch, R)
    loss = agg_loss(divergence, response_mask, agg)
    metrics = {
        "actor/distill_loss": loss.item(),
        "actor/distill_top_k_mass": masked_mean(covered.detach().exp(), response_mask).item(),
    }
    return loss, metrics
