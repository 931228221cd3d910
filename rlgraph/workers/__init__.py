"""Workers as plain Python classes; the runtime wraps them in Ray actors.

Importing this package is cheap: torch is imported, transformers only when a worker is built.
"""

from rlgraph.workers.batch import Rollout, position_ids_from_mask
from rlgraph.workers.critic import CriticWorker
from rlgraph.workers.policy import PolicyWorker
from rlgraph.workers.reward import RewardFunctionError, RuleReward, load_reward_fn
from rlgraph.workers.reward_model import RewardModelWorker
from rlgraph.workers.rollout_hf import HFRollout

__all__ = [
    "CriticWorker",
    "HFRollout",
    "PolicyWorker",
    "Rollout",
    "RewardFunctionError",
    "RewardModelWorker",
    "RuleReward",
    "load_reward_fn",
    "position_ids_from_mask",
]
