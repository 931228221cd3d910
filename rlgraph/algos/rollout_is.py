"""Truncated importance sampling (TIS) between the rollout's sampling log-probs and the trainer's.

The samples come from the rollout engine's policy mu (its weights and numerics: another process, another
dtype, a KV cache, or weights an update older), while PPO's ratio is taken against `old_log_prob`, the
trainer's own log-probs of the same tokens. Scaling each token's policy-gradient loss by
w = pi_old / mu corrects the gradient for that mismatch; truncating w at a cap bounds its variance
(Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL training"). The weight
is a constant of the update: it only scales each token's term, it is never differentiated.

    token:    w_t = min(pi_old(y_t) / mu(y_t), cap)            biased, low variance
    sequence: w_i = min(prod_t pi_old(y_t) / mu(y_t), cap)     on every token of sample i; unbiased
                                                               up to the cap, high variance

verl: algorithm.rollout_is = true with rollout_is_level = token | sequence, rollout_is_mode = truncate and
rollout_is_threshold = cap (the older actor.tis_imp_ratio_cap is the token level). Metric names are verl's.
"""

from __future__ import annotations

import torch

from rlgraph.algos.core import masked_mean, masked_sum, zero_masked

TIS_LEVELS = ("off", "token", "sequence")

LOG_RATIO_CLAMP = 20.0  # as the policy losses: exp(20) ~ 5e8 still fits float32


def rollout_is_weights(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    level: str,
    cap: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated importance weights (batch, response_len), 0 off the mask, and their metrics.

    `mismatch/rollout_is_{mean,max,min}` describe the weights before truncation (per loss token at
    level `token`, per sample with loss tokens at level `sequence`); `rollout_is_ratio_fraction_high` is
    the share of them the cap truncated. `mismatch_kl` = mean(log mu - log pi_old) and `mismatch_k3_kl`
    (k3 of the same KL) and `training/rollout_probs_diff_*` (|mu - pi_old| per token) measure the mismatch
    itself, whatever the level.
    """
    if level not in ("token", "sequence"):
        raise ValueError(f"unknown TIS level {level!r}; expected token or sequence")
    if not cap >= 1.0:
        raise ValueError(f"the TIS cap must be >= 1 (it truncates weights above it), got {cap}")
    mask = response_mask.bool()
    old_log_prob, rollout_log_prob = (zero_masked(t.detach(), mask) for t in (old_log_prob, rollout_log_prob))

    log_ratio = old_log_prob - rollout_log_prob  # (batch, response_len), 0 off the mask
    if level == "token":
        raw = torch.exp(torch.clamp(log_ratio, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))  # (batch, response_len)
        counted = raw[mask]
        weights = zero_masked(torch.clamp(raw, max=cap), mask)
    else:
        seq_log_ratio = masked_sum(log_ratio, mask, dim=-1)  # (batch,): log of the product over loss tokens
        raw = torch.exp(torch.clamp(seq_log_ratio, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))  # (batch,)
        counted = raw[mask.any(dim=-1)]  # a sample without loss tokens has no weight to speak of
        weights = zero_masked(torch.clamp(raw, max=cap).unsqueeze(-1).expand_as(log_ratio), mask)

    metrics = _weight_metrics(counted, cap)
    metrics.update(mismatch_metrics(old_log_prob, rollout_log_prob, mask))
    return weights, metrics


def _weight_metrics(raw: torch.Tensor, cap: float) -> dict[str, float]:
    if raw.numel() == 0:  # nothing is trained on: nothing is reweighted
        return {"mismatch/rollout_is_mean": 1.0, "mismatch/rollout_is_max": 1.0, "mismatch/rollout_is_min": 1.0,
                "mismatch/rollout_is_ratio_fraction_high": 0.0}
    return {
        "mismatch/rollout_is_mean": raw.mean().item(),
        "mismatch/rollout_is_max": raw.max().item(),
        "mismatch/rollout_is_min": raw.min().item(),
        "mismatch/rollout_is_ratio_fraction_high": (raw > cap).to(raw.dtype).mean().item(),
    }


def mismatch_metrics(old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor,
                     response_mask: torch.Tensor) -> dict[str, float]:
    """How far the rollout's probabilities of the sampled tokens are from the trainer's, over loss tokens.

    In float64: a mismatch of float32 rounding (~1e-7) would drown in float32's own, and k3 come out < 0."""
    mask = response_mask.bool()
    old_log_prob, rollout_log_prob = old_log_prob.double(), rollout_log_prob.double()
    log_ratio = torch.clamp(zero_masked(old_log_prob - rollout_log_prob, mask), -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    probs_diff = (torch.exp(rollout_log_prob) - torch.exp(old_log_prob)).abs()[mask]  # (loss tokens,)
    metrics = {
        "mismatch/mismatch_kl": masked_mean(-log_ratio, mask).item(),
        "mismatch/mismatch_k3_kl": masked_mean(torch.exp(log_ratio) - log_ratio - 1, mask).item(),
    }
    if probs_diff.numel():
        metrics["training/rollout_probs_diff_max"] = probs_diff.max().item()
        metrics["training/rollout_probs_diff_mean"] = probs_diff.mean().item()
    return metrics
