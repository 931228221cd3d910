"""Actor and critic losses. Each returns (loss, metrics) with metrics as plain floats.

Per-token inputs are zeroed at masked positions before any arithmetic: `torch.where` alone keeps a
NaN out of the forward value, but its backward would still multiply a zero gradient by that NaN.
"""

from __future__ import annotations

import torch

from rlgraph.algos.core import agg_loss, masked_mean, zero_masked

LOG_RATIO_CLAMP = 20.0  # exp(20) ~ 5e8: a bound on the ratio that float32 can still hold


def _check_clip_c(clip_c: float) -> None:
    if not clip_c > 1.0:
        raise ValueError(
            f"dual-clip constant clip_c must be > 1.0 (it bounds -A * ratio for A < 0 at -A * clip_c), got {clip_c}"
        )


def _rollout_corrected(pg_losses: torch.Tensor, rollout_is_weights: torch.Tensor | None,
                       response_mask: torch.Tensor) -> torch.Tensor:
    """Each token's loss times its rollout importance weight (rlgraph/algos/rollout_is.py), if any.

    The weight multiplies the loss after PPO's clip, as in verl: it corrects which samples the batch
    holds (drawn from the rollout's mu, not from pi_old), while the clip still bounds pi / pi_old.
    """
    if rollout_is_weights is None:
        return pg_losses
    return pg_losses * zero_masked(rollout_is_weights.detach(), response_mask)


def _zeroed(response_mask: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(zero_masked(t, response_mask) for t in tensors)


def _aggregated(pg_losses: torch.Tensor, response_mask: torch.Tensor, agg: str,
                rollout_is_weights: torch.Tensor | None, log_ratio: torch.Tensor, clipped: torch.Tensor,
                clipped_lower: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """A policy loss's per-token losses, weighted (TIS) and aggregated, and the metrics every one reports:
    the share of tokens whose clip was taken, of those dual-clipped (None: the loss has no dual clip), and
    the KL to pi_old estimated from `log_ratio` = log pi - log pi_old."""
    pg_loss = agg_loss(_rollout_corrected(pg_losses, rollout_is_weights, response_mask), response_mask, agg)
    metrics = {
        "actor/pg_clipfrac": masked_mean(clipped.to(log_ratio.dtype), response_mask).item(),
        "actor/pg_clipfrac_lower": 0.0 if clipped_lower is None else
        masked_mean(clipped_lower.to(log_ratio.dtype), response_mask).item(),
        "actor/ppo_kl": masked_mean(-log_ratio, response_mask).item(),
    }
    return pg_loss, metrics


def _clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, clip_low: float, clip_high: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's pessimistic per-token objective and whether the clipped branch was taken."""
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    return torch.maximum(pg_losses1, pg_losses2), pg_losses2 > pg_losses1


def policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_low: float,
    clip_high: float,
    clip_c: float = 3.0,
    agg: str = "token-mean",
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO clipped surrogate (Schulman et al. 2017) with dual clip (Ye et al. 2020).

    ratio = exp(log_prob - old_log_prob); loss = max(-A * ratio, -A * clip(ratio, 1 - clip_low,
    1 + clip_high)). Separate clip_low / clip_high allow DAPO's clip-higher. For A < 0 the loss is
    further capped at -A * clip_c so that one huge ratio cannot dominate the batch.
    `rollout_is_weights`: truncated importance weights pi_old / mu that scale each token's loss (TIS).
    """
    _check_clip_c(clip_c)
    old_log_prob, log_prob, advantages = _zeroed(response_mask, old_log_prob, log_prob, advantages)

    log_ratio = torch.clamp(log_prob - old_log_prob, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # (batch, response_len)
    ratio = torch.exp(log_ratio)
    clipped_loss, clipped = _clipped_surrogate(ratio, advantages, clip_low, clip_high)
    dual_bound = -advantages * clip_c
    dual_clipped = (clipped_loss > dual_bound) & (advantages < 0)
    pg_losses = torch.where(advantages < 0, torch.minimum(clipped_loss, dual_bound), clipped_loss)
    return _aggregated(pg_losses, response_mask, agg, rollout_is_weights, log_ratio, clipped, dual_clipped)


def gspo_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_low: float,
    clip_high: float,
    agg: str = "seq-mean-token-mean",
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GSPO (Zheng et al. 2025): clip a sequence-level ratio instead of per-token ratios.

    s_i = exp(mean_t(log_prob - old_log_prob)) is the length-normalised sequence ratio. Each token uses
    s_i.detach() * exp(log_prob - log_prob.detach()): the value is s_i, the gradient flows through the
    token's own log-prob, so A_i-weighted token gradients are scaled by the sequence ratio.
    The clip range is typically tiny (3e-4 / 4e-4 in the paper), as s_i is a geometric mean.
    `rollout_is_weights` scale each token's loss as in `policy_loss`; sequence-level ones (one weight per
    sample) match GSPO's sequence-level objective.
    """
    old_log_prob, log_prob, advantages = _zeroed(response_mask, old_log_prob, log_prob, advantages)

    log_ratio = log_prob - old_log_prob  # (batch, response_len)
    seq_log_ratio = masked_mean(log_ratio, response_mask, dim=-1)  # (batch,)
    token_log_ratio = seq_log_ratio.detach().unsqueeze(-1) + log_prob - log_prob.detach()
    # Clamped above only, as in the reference recipe: a huge ratio overflows, a tiny one is harmless.
    ratio = torch.exp(torch.clamp(token_log_ratio, max=10.0))  # (batch, response_len)
    pg_losses, clipped = _clipped_surrogate(ratio, advantages, clip_low, clip_high)
    return _aggregated(pg_losses, response_mask, agg, rollout_is_weights, log_ratio, clipped)  # no dual clip


def cispo_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_low: float,
    clip_high: float,
    agg: str = "token-mean",
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """CISPO (MiniMax-M1, 2025): clip the importance weight, not the update.

    loss = -sg(clip(ratio, 1 - clip_low, 1 + clip_high)) * A * log_prob. The clipped ratio only scales
    each token's REINFORCE gradient, so a token whose ratio left the range still learns; PPO's clip
    zeroes exactly those tokens, which are often the rare "fork" tokens of a reasoning trace. The paper
    sets no lower bound (a large clip_low) and tunes clip_high.
    `rollout_is_weights` scale each token's loss as in `policy_loss`: the detached weight becomes
    sg(clip(pi / pi_old) * min(pi_old / mu, cap)), the two truncated separately.
    """
    old_log_prob, log_prob, advantages = _zeroed(response_mask, old_log_prob, log_prob, advantages)

    log_ratio = torch.clamp(log_prob - old_log_prob, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # (batch, response_len)
    ratio = torch.exp(log_ratio).detach()
    is_weight = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    pg_losses = -is_weight * advantages * log_prob
    return _aggregated(pg_losses, response_mask, agg, rollout_is_weights, log_ratio, is_weight != ratio)


def value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    clip: float,
    agg: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped value loss: 0.5 * agg(max((v - R)^2, (clip(v, V - c, V + c) - R)^2)).

    `values` are the critic's predictions at rollout time; clipping the new prediction around them
    keeps one update from moving the critic far, as PPO does for the policy.
    """
    vpreds, returns, values = _zeroed(response_mask, vpreds, returns, values)

    vpred_clipped = torch.clamp(vpreds, values - clip, values + clip)  # (batch, response_len)
    vf_losses1 = (vpreds - returns) ** 2
    vf_losses2 = (vpred_clipped - returns) ** 2
    vf_loss = 0.5 * agg_loss(torch.maximum(vf_losses1, vf_losses2), response_mask, agg)
    metrics = {"critic/vf_clipfrac": masked_mean((vf_losses2 > vf_losses1).to(vpreds.dtype), response_mask).item()}
    return vf_loss, metrics


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last dim: logsumexp(z) - sum(softmax(z) * z). (...)"""
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(-1)


def entropy_loss(logits: torch.Tensor, response_mask: torch.Tensor, agg: str = "token-mean") -> torch.Tensor:
    """Aggregated token entropy of (batch, response_len, vocab) logits; subtract coef * this to explore.

    Logits at masked positions are not zeroed (that would copy the whole vocab-sized tensor); they are
    left out of the value, but a NaN there would still reach its own position's gradient.
    """
    return agg_loss(entropy_from_logits(logits), response_mask, agg)
