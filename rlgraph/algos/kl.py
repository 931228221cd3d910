"""KL between the policy and the reference model: per-token estimators, reward penalty, coefficient control.

The estimators follow Schulman's "Approximating KL Divergence" note, with r = ref / policy:
k1 = -log r (unbiased, can be negative), k2 = (log r)^2 / 2 (low variance, biased),
k3 = r - 1 - log r (unbiased and always >= 0). A `+` suffix keeps the forward value of the named
estimator but takes the gradient of k2, whose gradient is the unbiased one for a KL *loss*.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlgraph.algos.core import masked_mean, zero_masked

_BASE_KINDS = {"k1": "k1", "kl": "k1", "abs": "abs", "k2": "k2", "mse": "k2", "k3": "k3", "low_var_kl": "k3"}
KL_KINDS = tuple(_BASE_KINDS) + tuple(f"{kind}+" for kind in _BASE_KINDS)


def _k2(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    return 0.5 * (log_prob - ref_log_prob) ** 2


def _kl_forward(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, base: str) -> torch.Tensor:
    if base == "k1":
        return log_prob - ref_log_prob
    if base == "abs":
        return (log_prob - ref_log_prob).abs()
    if base == "k2":
        return _k2(log_prob, ref_log_prob)
    # k3: clamps keep exp() finite and bound the penalty when the two models disagree wildly.
    log_r = torch.clamp(ref_log_prob - log_prob, -20.0, 20.0)
    return torch.clamp(torch.exp(log_r) - log_r - 1.0, -10.0, 10.0)


def kl_penalty(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-token KL estimate of `kind` (see KL_KINDS), same shape as the inputs."""
    base = _BASE_KINDS.get(kind.removesuffix("+"))
    if base is None:
        raise ValueError(f"unknown KL kind {kind!r}; expected one of {', '.join(KL_KINDS)}")
    forward = _kl_forward(log_prob, ref_log_prob, base)
    if not kind.endswith("+") or base == "k2":
        return forward
    # Straight-through: value of `forward`, gradient of k2.
    k2 = _k2(log_prob, ref_log_prob)
    return k2 + (forward - k2).detach()


def apply_kl_penalty(
    token_level_scores: torch.Tensor,
    log_prob: torch.Tensor,
    ref_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    kl_coef: float,
    kind: str,
) -> tuple[torch.Tensor, dict[str, float]]:
    """KL in the reward (InstructGPT style): r_t = score_t - kl_coef * kl_t on response tokens.

    The reported KL averages each sequence's token-mean KL over the batch, so a long answer counts
    once; it is the value to feed to a KL controller's update().
    """
    kl = zero_masked(kl_penalty(log_prob, ref_log_prob, kind), response_mask)  # (batch, response_len)
    token_level_rewards = token_level_scores - kl_coef * kl
    current_kl = masked_mean(kl, response_mask, dim=-1).mean().item()
    metrics = {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": float(kl_coef)}
    return token_level_rewards, metrics


@dataclass
class FixedKLController:
    """A constant KL coefficient."""

    coef: float

    @property
    def value(self) -> float:
        return self.coef

    def update(self, current_kl: float, n_steps: int) -> None:
        pass


@dataclass
class AdaptiveKLController:
    """Proportional controller steering the observed KL towards `target` (Ziegler et al. 2019).

    error = clip(current_kl / target - 1, -0.2, 0.2); coef *= 1 + error * n_steps / horizon.
    """

    init_coef: float
    target: float
    horizon: float

    def __post_init__(self) -> None:
        self.value = float(self.init_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon
