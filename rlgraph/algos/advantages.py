"""Advantage estimators: token-level rewards in, (advantages, returns) out.

All take (batch, response_len) tensors and a response mask; the group-based ones also take `index`,
one group id per row (ints or strings), naming the rows that answer the same prompt.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from rlgraph.algos.core import masked_whiten, zero_masked


@torch.no_grad()
def gae(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised Advantage Estimation (Schulman et al. 2016), for PPO with a critic.

    delta_t = r_t + gamma * V_{t+1} - V_t,  A_t = delta_t + gamma * lam * A_{t+1}.
    A masked token is skipped: the next value and the running advantage carry over it unchanged, so
    tool-output or padding tokens inside a response neither add a TD error nor bootstrap a value.
    Returns whitened advantages and returns = A + V (A before whitening).
    """
    mask = response_mask.bool()
    batch, response_len = token_level_rewards.shape
    zero = token_level_rewards.new_zeros(batch)
    next_value, last_gae_lam = zero, zero  # (batch,)
    advantages_reversed = []
    for t in reversed(range(response_len)):
        delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]
        next_value = torch.where(mask[:, t], values[:, t], next_value)
        last_gae_lam = torch.where(mask[:, t], delta + gamma * lam * last_gae_lam, last_gae_lam)
        advantages_reversed.append(last_gae_lam)
    advantages = torch.stack(advantages_reversed[::-1], dim=1)  # (batch, response_len)
    returns = advantages + values
    return masked_whiten(advantages, response_mask), returns


# --- group-relative estimators (one score per row, compared within its prompt's group) ---


def group_ids(index: Sequence, batch: int, device: torch.device) -> torch.Tensor:
    """Dense 0..G-1 ids for the group labels in `index` (list, numpy array or tensor)."""
    if isinstance(index, (torch.Tensor, np.ndarray)):
        index = index.tolist()
    labels = list(index)
    if len(labels) != batch:
        raise ValueError(f"index has {len(labels)} entries but the batch has {batch} rows")
    dense: dict = {}
    ids = [dense.setdefault(label, len(dense)) for label in labels]
    return torch.tensor(ids, dtype=torch.long, device=device)


def group_stats(scores: torch.Tensor, index: Sequence) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row (group mean, unbiased group std, group size), each (batch,), in float64.

    A group of one has no peers to compare against: its mean is 0 and its std is 1, so the row keeps
    its raw score. Float64 keeps (score - mean) exact enough that a tiny std does not amplify noise.
    """
    ids = group_ids(index, scores.shape[0], scores.device)
    s = scores.double()
    n_groups = int(ids.max().item()) + 1 if ids.numel() else 0
    size = s.new_zeros(n_groups).index_add_(0, ids, torch.ones_like(s))
    mean = s.new_zeros(n_groups).index_add_(0, ids, s) / size
    sq_dev = s.new_zeros(n_groups).index_add_(0, ids, (s - mean[ids]) ** 2)
    std = torch.sqrt(sq_dev / (size - 1).clamp(min=1))
    single = size == 1
    mean = torch.where(single, 0.0, mean)
    std = torch.where(single, 1.0, std)
    return mean[ids], std[ids], size[ids]


def sequence_scores(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Outcome score of each row: the sum of its masked-in rewards. (batch,)"""
    return zero_masked(token_level_rewards, response_mask).sum(-1)


def broadcast_scores(scores: torch.Tensor, like: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Spread a per-row value over its response tokens, 0 on masked tokens. (batch, response_len)"""
    return zero_masked(scores.to(like.dtype).unsqueeze(-1).expand_as(like), response_mask)


@torch.no_grad()
def grpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence,
    epsilon: float = 1e-6,
    norm_by_std: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO (Shao et al. 2024): A_i = (s_i - mean_group) / (std_group + eps), same for every token.

    norm_by_std=False gives Dr. GRPO (Liu et al. 2025): A_i = s_i - mean_group, which does not
    up-weight prompts whose answers all score alike.
    """
    scores = sequence_scores(token_level_rewards, response_mask)  # (batch,)
    mean, std, _ = group_stats(scores, index)
    centred = scores.double() - mean
    adv = centred / (std + epsilon) if norm_by_std else centred
    advantages = broadcast_scores(adv, token_level_rewards, response_mask)
    return advantages, advantages


@torch.no_grad()
def rloo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence,
    epsilon: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO (Ahmadian et al. 2024): A_i = s_i - mean of the other n-1 scores in the group.

    Written as (s_i - mean_group) * n / (n - 1). A group of one keeps its raw score.
    `epsilon` is accepted for a uniform estimator signature and unused.
    """
    scores = sequence_scores(token_level_rewards, response_mask)  # (batch,)
    mean, _, size = group_stats(scores, index)
    s = scores.double()
    loo = s * size / (size - 1).clamp(min=1) - mean * size / (size - 1).clamp(min=1)
    adv = torch.where(size > 1, loo, s)
    advantages = broadcast_scores(adv, token_level_rewards, response_mask)
    return advantages, advantages


@torch.no_grad()
def reinforce_pp_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ (Hu 2025): discounted reward-to-go, whitened over the whole batch.

    The running return is reset at every masked token, so nothing past EOS flows back into it.
    """
    mask = response_mask.bool()
    returns = torch.zeros_like(token_level_rewards)  # (batch, response_len)
    running = token_level_rewards.new_zeros(token_level_rewards.shape[0])  # (batch,)
    for t in reversed(range(token_level_rewards.shape[1])):
        running = token_level_rewards[:, t] + gamma * running
        returns[:, t] = running
        running = zero_masked(running, mask[:, t])
    advantages = zero_masked(masked_whiten(returns, response_mask), response_mask)
    return advantages, returns


@torch.no_grad()
def reinforce_pp_baseline_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence,
    epsilon: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++-baseline: s_i - mean_group per row, then whitened over the batch.

    Subtracting the group mean removes the prompt's difficulty; whitening over the batch (not the
    group) scales without dividing by a small per-group std. `epsilon` is unused.
    """
    scores = sequence_scores(token_level_rewards, response_mask)  # (batch,)
    mean, _, _ = group_stats(scores, index)
    centred = broadcast_scores(scores.double() - mean, token_level_rewards, response_mask)
    advantages = zero_masked(masked_whiten(centred, response_mask), response_mask)
    return advantages, advantages


@torch.no_grad()
def remax_advantage(
    token_level_rewards: torch.Tensor,
    reward_baselines: torch.Tensor,
    response_mask: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax (Li et al. 2024): reward-to-go minus the reward of the greedy answer to the same prompt.

    reward_baselines is (batch,), one greedy-decoding reward per row.
    """
    rewards = zero_masked(token_level_rewards, response_mask)
    returns = rewards.flip(-1).cumsum(-1).flip(-1)  # (batch, response_len)
    advantages = returns - zero_masked(reward_baselines.unsqueeze(-1).expand_as(returns), response_mask)
    return advantages, returns


@torch.no_grad()
def distill_advantage(
    log_prob: torch.Tensor,
    teacher_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    coef: float = 1.0,
    gamma: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """On-policy distillation: each sampled token's advantage is the teacher's log-probability of it minus the
    student's, the negative of a one-sample estimate of the per-token reverse KL(student || teacher).

    A policy-gradient update on it lowers the reverse KL on the student's own samples (as in the on-policy
    distillation recipes of Agarwal et al. 2024 (GKD, its reverse-KL case) and Thinking Machines' Tinker): a
    token the teacher finds likelier than the student is pushed up, one it finds unlikely is pushed down, with
    no reward needed. `gamma` 0 scores each token alone (the recipes' default); above 0, a token's advantage
    also counts the discounted advantages of the tokens after it. Returns (advantages, returns = advantages).
    """
    per_token = zero_masked(coef * (teacher_log_prob.float() - log_prob.float()), response_mask)
    if gamma == 0.0:
        return per_token, per_token
    mask = response_mask.bool()
    advantages = torch.zeros_like(per_token)
    running = torch.zeros_like(per_token[:, 0])
    for t in reversed(range(per_token.shape[1])):
        # a masked token (an environment's reply) is skipped: the running sum carries over it, as in gae
        running = torch.where(mask[:, t], per_token[:, t] + gamma * running, running)
        advantages[:, t] = running
    advantages = zero_masked(advantages, response_mask)
    return advantages, advantages
