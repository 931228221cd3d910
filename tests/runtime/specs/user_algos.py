"""User functions for tests/runtime/specs/grpo_user.rl: a GRPO advantage written independently of
rlgraph.algos (a loop over each prompt's responses, float64), and a policy loss that hands over to the
built-in one, so that a run with both can be compared with the built-in spec value for value."""

import statistics

import torch


def group_normalised(scores, *, epsilon, index, response_mask):
    """(s_i - mean of its prompt's scores) / (their sample std + epsilon), on every trained token."""
    reward = (scores * response_mask).sum(-1).double().tolist()
    advantage = []
    for row, uid in enumerate(index):
        group = [r for r, u in zip(reward, index) if u == uid]
        std = statistics.stdev(group) if len(group) > 1 else 1.0
        mean = statistics.fmean(group) if len(group) > 1 else 0.0
        advantage.append((reward[row] - mean) / (std + epsilon))
    return torch.tensor(advantage, dtype=torch.float64)[:, None] * response_mask


def builtin_ppo(old_log_prob, log_prob, advantages, response_mask, *, clip_low, clip_high, agg, clip_c, scale):
    from rlgraph.algos.losses import policy_loss

    loss, metrics = policy_loss(old_log_prob, log_prob, advantages, response_mask, clip_low=clip_low,
                                clip_high=clip_high, clip_c=clip_c, agg=agg)
    return scale * loss, {**metrics, "actor/user_loss_scale": scale}


def wrong_shape(scores, *, epsilon):
    return scores.sum(-1)  # (batch,): one value per row, not per token
