"""Workers as plain Python classes; the runtime wraps them in Ray actors.

Importing this package is cheap: each name below is imported on first use (PEP 562), so reading the engine
registry (`rlgraph.workers.engines`) imports neither torch nor transformers; transformers is imported only
when a worker is built.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "BasePolicy": "rlgraph.workers.policy",
    "CriticWorker": "rlgraph.workers.critic",
    "JudgeWorker": "rlgraph.workers.judge",
    "PolicyWorker": "rlgraph.workers.policy",
    "Rollout": "rlgraph.workers.batch",
    "RewardFunctionError": "rlgraph.workers.reward",
    "RewardModelWorker": "rlgraph.workers.reward_model",
    "RolloutWorker": "rlgraph.workers.rollout",
    "RuleReward": "rlgraph.workers.reward",
    "Segment": "rlgraph.workers.batch",
    "TokenSource": "rlgraph.workers.batch",
    "load_reward_fn": "rlgraph.workers.reward",
    "position_ids_from_mask": "rlgraph.workers.batch",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from rlgraph.workers.batch import Rollout, Segment, TokenSource, position_ids_from_mask
    from rlgraph.workers.critic import CriticWorker
    from rlgraph.workers.judge import JudgeWorker
    from rlgraph.workers.policy import BasePolicy, PolicyWorker
    from rlgraph.workers.reward import RewardFunctionError, RuleReward, load_reward_fn
    from rlgraph.workers.reward_model import RewardModelWorker
    from rlgraph.workers.rollout import RolloutWorker


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
