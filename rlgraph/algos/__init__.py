"""RL algorithm core as pure torch functions: masked statistics, advantage estimators, losses, KL.

Shapes are (batch, response_len) unless a docstring says otherwise; masks are 1 on response tokens.
"""

from rlgraph.algos.advantages import (
    distill_advantage,
    gae,
    grpo_advantage,
    reinforce_pp_advantage,
    reinforce_pp_baseline_advantage,
    remax_advantage,
    rloo_advantage,
)
from rlgraph.algos.core import AGG_MODES, agg_loss, masked_mean, masked_var, masked_whiten
from rlgraph.algos.kl import KL_KINDS, AdaptiveKLController, FixedKLController, apply_kl_penalty, kl_penalty
from rlgraph.algos.losses import (
    cispo_policy_loss,
    entropy_from_logits,
    entropy_loss,
    gspo_policy_loss,
    policy_loss,
    value_loss,
)
from rlgraph.algos.registry import ADVANTAGE_ESTIMATORS, POLICY_LOSSES, get_advantage_estimator, get_policy_loss
from rlgraph.algos.rollout_is import TIS_LEVELS, rollout_is_weights

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGG_MODES",
    "KL_KINDS",
    "POLICY_LOSSES",
    "TIS_LEVELS",
    "AdaptiveKLController",
    "FixedKLController",
    "agg_loss",
    "apply_kl_penalty",
    "cispo_policy_loss",
    "distill_advantage",
    "entropy_from_logits",
    "entropy_loss",
    "gae",
    "get_advantage_estimator",
    "get_policy_loss",
    "grpo_advantage",
    "gspo_policy_loss",
    "kl_penalty",
    "masked_mean",
    "masked_var",
    "masked_whiten",
    "policy_loss",
    "reinforce_pp_advantage",
    "reinforce_pp_baseline_advantage",
    "remax_advantage",
    "rloo_advantage",
    "rollout_is_weights",
    "value_loss",
]
