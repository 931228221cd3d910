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
from rlgraph.workers.reward import RewardScores

# port name of a transform's input -> the estimator's parameter name
_ESTIMATOR_ARGS = {"rewards": "token_level_rewards", "values": "values"}


def scored(name: str, reward: RuleReward, rollout: Rollout, when: str) -> RewardScores:
    """The scores of `rollout` and which rows have one; a reward function that fails (raises, hangs, exits,
    or gives more rows no usable score than its `max_invalid_fraction` allows) is a RunError naming the
    reward and the row."""
    try:
        return reward.score_rows(rollout)
    except RewardFunctionError as err:
        raise RunError(f"reward `{name}` failed in {when}: {err}") from None


def score(name: str, reward: RuleReward, rollout: Rollout, when: str) -> torch.Tensor:
    """token_level_scores of `rollout` (batch, R); a row without a usable score (if allowed) scores 0."""
    return scored(name, reward, rollout, when).token_level_scores


class DriverCalls:
    """Runs the plan's reward and transform calls; holds the KL controllers (part of a checkpoint)."""

    def __init__(self, plan: Plan, rewards: dict[str, RuleReward]) -> None:
        self.rewards = rewards
        # The rows of the step's rollout that some reward left without a score (allowed by its
        # max_invalid_fraction): the estimators leave them out. Keyed by the rollout object, which
        # both step paths hand every call of one step.
        self.unscored: tuple[Rollout, torch.Tensor] | None = None
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
            reward = self.rewards[call.target]
            result = scored(call.target, reward, rollout, when)
            unscored = ~result.valid
            if self.unscored is not None and self.unscored[0] is rollout:  # a second reward of the step
                unscored |= self.unscored[1]
            self.unscored = (rollout, unscored)
            # with no share allowed an unscored row is an error, so the count would always read 0
            metrics = {f"reward/{call.target}/invalid": result.num_invalid} if reward.max_invalid_fraction else {}
            metrics.update({f"reward/{call.target}/{key}": value for key, value in result.extras.items()})
            return {"scores": result.token_level_scores}, metrics
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
        """advantages and returns; rows without a usable score are left out of the estimate.

        Such a row's score is a stand-in 0, so the estimator runs on the other rows alone: a group
        estimator (GRPO, RLOO) does not count it in its prompt's mean and std, GAE and REINFORCE++ do not
        count it in the batch whitening. Its advantage is 0, so the policy loss takes no gradient from it,
        and its return is its own value (GAE), so the critic's error on it is 0 at the start of the update.
        The row stays in the batch (the rollout went to the workers before the reward finished): it still
        counts in a token-mean's denominator and in the KL and entropy terms, which use no score.
        """
        unscored = self.unscored[1] if self.unscored is not None and self.unscored[0] is rollout else None
        if unscored is None or not unscored.any():
            return self._estimate(call, inputs, rollout)
        keep = (~unscored).nonzero().squeeze(1)
        advantages = torch.zeros(rollout.responses.shape, dtype=torch.float32)  # (batch, R)
        returns = inputs["values"].float().clone() if "values" in inputs else torch.zeros_like(advantages)
        if len(keep):
            part = self._estimate(call, {port: value[keep] for port, value in inputs.items()}, rollout.select(keep))
            advantages[keep], returns[keep] = part["advantages"], part["returns"]
        return {"advantages": advantages, "returns": returns}

    def _estimate(self, call: CallPlan, inputs: dict[str, Any], rollout: Rollout) -> dict[str, torch.Tensor]:
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
