"""The calls that run on the driver: rule rewards and transforms (KL penalty, advantage estimators).

They are pure tensor maths on the batch (rlgraph.algos), cheap next to a forward pass, so they run
where the batch already is instead of costing a round trip to a worker.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import torch

from rlgraph.algos import AdaptiveKLController, FixedKLController, apply_kl_penalty, get_advantage_estimator
from rlgraph.plan.model import CallPlan, Plan
from rlgraph.runtime.errors import RunError
from rlgraph.workers import RewardFunctionError, Rollout, RuleReward

# port name of a transform's input -> the estimator's parameter name
_ESTIMATOR_ARGS = {"rewards": "token_level_rewards", "values": "values"}


def score(name: str, reward: RuleReward, rollout: Rollout, when: str) -> torch.Tensor:
    """token_level_scores of `rollout`; a reward function that fails is a RunError naming it and the row."""
    try:
        return reward.score(rollout)  # (batch, R)
    except RewardFunctionError as err:
        raise RunError(f"reward `{name}` failed in {when}: {err}") from None


class DriverCalls:
    """Runs the plan's reward and transform calls; holds the KL controllers (part of a checkpoint)."""

    def __init__(self, plan: Plan, rewards: dict[str, RuleReward]) -> None:
        self.rewards = rewards
        self.kl_controllers: dict[str, FixedKLController | AdaptiveKLController] = {}
        for call in plan.calls:
            if call.kind == "transform" and call.target == "kl_penalty":
                kl = call.settings  # KlPenaltySettings
                self.kl_controllers[call.id] = (
                    AdaptiveKLController(kl.coef, kl.target, kl.horizon)
                    if kl.target is not None else FixedKLController(kl.coef)
                )

    def run(self, call: CallPlan, inputs: dict[str, Any], rollout: Rollout, when: str = "a step") -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        """(outputs by port name, metrics) of one reward or transform call; `inputs` are by port name."""
        if call.kind == "reward":
            return {"scores": score(call.target, self.rewards[call.target], rollout, when)}, {}
        if call.target == "kl_penalty":
            controller = self.kl_controllers[call.id]
            rewards, metrics = apply_kl_penalty(
                inputs["scores"], inputs["log_prob"], inputs["ref_log_prob"], rollout.loss_mask,
                controller.value, call.settings.kind,
            )
            controller.update(metrics["actor/reward_kl_penalty"], n_steps=len(rollout))
            return {"rewards": rewards}, metrics
        return self._estimator(call, inputs, rollout), {}

    def _estimator(self, call: CallPlan, inputs: dict[str, Any], rollout: Rollout) -> dict[str, torch.Tensor]:
        estimator = get_advantage_estimator(call.target)
        params = inspect.signature(estimator).parameters
        args: dict[str, Any] = {_ESTIMATOR_ARGS.get(port, port): value for port, value in inputs.items()}
        if "response_mask" in params:  # verl's name for the loss mask
            args["response_mask"] = rollout.loss_mask
        if "index" in params:
            args["index"] = rollout.uid  # the prompt each sample answers: GRPO/RLOO groups
        # the settings' fields carry the estimator's parameter names (gamma, lam, epsilon, norm_by_std)
        args.update({f.name: getattr(call.settings, f.name) for f in dataclasses.fields(call.settings)
                     if f.name in params})
        advantages, returns = estimator(**args)
        return {"advantages": advantages.float(), "returns": returns.float()}

    # --- checkpoint state: the adaptive KL coefficient moves ---

    def state_dict(self) -> dict[str, float]:
        return {call_id: float(c.value) for call_id, c in self.kl_controllers.items()}

    def load_state_dict(self, state: dict[str, float]) -> None:
        for call_id, value in state.items():
            controller = self.kl_controllers.get(call_id)
            if isinstance(controller, AdaptiveKLController):
                controller.value = value
