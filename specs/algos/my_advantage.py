"""A transform and a policy loss written outside rlgraph, declared in specs/custom_transform_arith.rl.

Plain torch: each function gets the tensors the spec names plus the keyword arguments it declares, and
names `response_mask` / `index` to be given the batch's loss mask and each row's prompt id.
"""

import torch


def leave_one_out(scores, *, baseline_weight, index, response_mask):
    """RLOO's advantage: a response's reward minus `baseline_weight` x the mean reward of the other responses
    to its prompt. `scores` (batch, R) holds each response's reward on its last token; the advantage is put on
    every token the policy is trained on."""
    reward = scores.sum(-1)  # (batch,)
    uid = torch.as_tensor(index)
    group_sum = torch.zeros(int(uid.max()) + 1, dtype=reward.dtype).index_add_(0, uid, reward)
    group_size = torch.bincount(uid).to(reward.dtype)
    others = (group_sum[uid] - reward) / (group_size[uid] - 1).clamp(min=1)  # mean of the other responses
    advantage = reward - baseline_weight * others  # (batch,)
    return advantage[:, None] * response_mask  # (batch, R)


def clipped_token_mean(old_log_prob, log_prob, advantages, response_mask, *, clip_low, clip_high, agg,
                       max_ratio):
    """PPO's clipped surrogate, averaged over the batch's trained tokens, with the ratio of negative-advantage
    tokens also bounded by `max_ratio` (dual clip). Returns (loss, metrics) as rlgraph's own losses do."""
    mask = response_mask.to(log_prob.dtype)
    ratio = torch.exp((log_prob - old_log_prob).clamp(-20.0, 20.0))
    surrogate = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(1 - clip_low, 1 + clip_high))
    surrogate = torch.where(advantages < 0, torch.minimum(surrogate, -advantages * max_ratio), surrogate)
    loss = (surrogate * mask).sum() / mask.sum().clamp(min=1)  # token-mean
    clipped = ((ratio - 1).abs() > torch.where(advantages < 0, clip_low, clip_high)).to(mask.dtype)
    tokens = mask.sum().clamp(min=1)
    # verl's names, so dashboards read a user loss like a built-in one (approx. KL: mean of old - new log-prob)
    return loss, {"actor/pg_clipfrac": ((clipped * mask).sum() / tokens).item(),
                  "actor/ppo_kl": (((old_log_prob - log_prob) * mask).sum() / tokens).item()}
