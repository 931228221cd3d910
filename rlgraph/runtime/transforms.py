"""The calls that run on the driver: rule rewards and transforms (KL penalty, advantage estimators).

They are pure tensor maths on the batch (rlgraph.algos), cheap next to a forward pass, so they run
where the batch already is instead of costing a round trip to a worker.
"""

from __future__ import annotations

import dataclasses
import inspect
import traceback
from typing import Any

import torch

from rlgraph.algos import AdaptiveKLController, FixedKLController, apply_kl_penalty, get_advantage_estimator
from rlgraph.algos.shaping import overlong_penalty
from rlgraph.contract.settings import UserFunctionSettings
from rlgraph.plan.model import CallPlan, Plan
from rlgraph.runtime.errors import ProcessDiedError, RunError
from rlgraph.workers import RewardFunctionError, Rollout, RuleReward
from rlgraph.workers.reward import RewardScores
from rlgraph.workers.reward_process import ChildKilled
from rlgraph.workers.user_functions import UserFunctionError, describe, load_user_function, transform_arguments

# port name of a transform's input -> the estimator's parameter name
_ESTIMATOR_ARGS = {"rewards": "token_level_rewards", "values": "values", "baselines": "reward_baselines"}


def prompt_baselines(baseline_scores: torch.Tensor, uid: list[int]) -> torch.Tensor:
    """(batch,) the baseline of each row of the trained rollout: the mean sequence score of its prompt's rows in
    a second generate call (ReMax: the one greedy answer). That call's rows are its prompts in order, n rows
    each (rlgraph/workers/rollout.py), and a row's uid is its prompt's index in the step, in both calls."""
    per_row = baseline_scores.sum(-1).float()  # (prompts x n_baseline,)
    prompts = len(set(uid))
    if prompts == 0 or len(per_row) % prompts:
        raise RunError(f"the baseline has {len(per_row)} rows, which is not a whole number per prompt for the "
                       f"{prompts} prompts of the step")
    per_prompt = per_row.view(prompts, -1).mean(-1)  # (prompts,)
    return per_prompt[torch.as_tensor(uid, dtype=torch.long)]


def scored(name: str, reward: RuleReward, rollout: Rollout, when: str) -> RewardScores:
    """The scores of `rollout` and which rows have one; a reward function that fails (raises, hangs, exits,
    or gives more rows no usable score than its `max_invalid_fraction` allows) is a RunError naming the
    reward and the row. Its process killed from outside is a ProcessDiedError: the run recovers from it."""
    try:
        return reward.score_rows(rollout)
    except RewardFunctionError as err:
        raise RunError(f"reward `{name}` failed in {when}: {err}") from None
    except ChildKilled as err:
        raise ProcessDiedError(f"reward `{name}` could not score {when}: {err}.", died=str(err)) from None


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
        self.user_transforms: dict[str, Any] = {}  # call id -> the function of a transform the spec declares
        # field -> the judge role that scores it: a NaN on a row of it is a verdict that held no score
        self.judged = {name: call.target for call in plan.calls if call.kind == "role" and call.role_kind == "judge"
                       for _, name in call.outputs}
        for call in plan.calls:
            if isinstance(call.settings, UserFunctionSettings):
                try:
                    self.user_transforms[call.id] = load_user_function(call.settings, "transform")
                except UserFunctionError as err:
                    raise RunError(str(err)) from None
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
            # the responses it scores: the trained rollout's, or a second generate's (ReMax's greedy answers)
            responses = inputs.get("responses", rollout)
            result = scored(call.target, reward, responses, when)
            if responses is rollout:  # a second generate's unscored rows only score 0 (a baseline of 0)
                unscored = ~result.valid
                if self.unscored is not None and self.unscored[0] is rollout:  # a second reward of the step
                    unscored |= self.unscored[1]
                self.unscored = (rollout, unscored)
            # with no share allowed an unscored row is an error, so the count would always read 0
            metrics = {f"reward/{call.target}/invalid": result.num_invalid} if reward.max_invalid_fraction else {}
            metrics.update({f"reward/{call.target}/{key}": value for key, value in result.extras.items()})
            metrics.update({f"reward/{call.target}/{key}": value for key, value in result.metrics.items()})
            return {"scores": result.token_level_scores}, metrics
        inputs, metrics = self.unjudged(call, inputs, rollout)
        outputs, more = self._transform(call, inputs, rollout, when)
        return outputs, {**metrics, **more}

    def unjudged(self, call: CallPlan, inputs: dict[str, Any], rollout: Rollout) -> tuple[dict[str, Any], dict]:
        """A judge's scores with its unparsed verdicts (NaN, rlgraph/workers/judge.py) as 0, and those rows marked
        unscored, as a reward's rows without a usable score are: the estimators leave them out."""
        metrics: dict[str, float] = {}
        for port, name in call.inputs:
            if name not in self.judged or not isinstance(inputs.get(port), torch.Tensor):
                continue
            unparsed = torch.isnan(inputs[port]).any(-1)  # (batch,)
            metrics[f"judge/{self.judged[name]}/invalid"] = int(unparsed.sum())
            if unparsed.any():
                inputs = {**inputs, port: inputs[port].nan_to_num(0.0)}
                if self.unscored is not None and self.unscored[0] is rollout:
                    unparsed = unparsed | self.unscored[1]
                self.unscored = (rollout, unparsed)
        return inputs, metrics

    def _transform(self, call: CallPlan, inputs: dict[str, Any], rollout: Rollout,
                   when: str) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        if call.id in self.user_transforms:
            return self._user_transform(call, inputs, rollout, when)
        if call.target == "kl_penalty":
            controller = self.kl_controllers[call.id]
            rewards, metrics = apply_kl_penalty(
                inputs["scores"], inputs["log_prob"], inputs["ref_log_prob"], rollout.loss_mask,
                controller.value, call.settings.kind,
            )
            controller.update(metrics["actor/reward_kl_penalty"], n_steps=len(rollout))
            return {"rewards": rewards}, metrics
        if call.target == "overlong_penalty":
            shaping = call.settings  # OverlongPenaltySettings
            rewards, penalty = overlong_penalty(inputs["scores"], rollout.loss_mask.sum(-1), rollout.reward_index,
                                                shaping.max_new_tokens, shaping.buffer, shaping.penalty_factor)
            return {"rewards": rewards}, {"reward/overlong_penalty/mean": penalty.mean().item(),
                                          "reward/overlong_fraction": (penalty < 0).float().mean().item()}
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
        if "baselines" in inputs:  # one baseline value per row, from its prompt's rows of the second generate
            inputs = {**inputs, "baselines": prompt_baselines(inputs["baselines"], rollout.uid)}
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

    def _user_transform(self, call: CallPlan, inputs: dict[str, Any], rollout: Rollout,
                        when: str) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        """A declared transform: fn(<inputs> by their declared names, <args>, and the batch's response_mask,
        index (each row's prompt uid) and rollout where it names them). Every row is passed, scored or not (a
        row without a usable score holds 0)."""
        settings: UserFunctionSettings = call.settings
        fn = self.user_transforms[call.id]
        batch = {"response_mask": rollout.loss_mask, "index": rollout.uid, "rollout": rollout}
        kwargs = {**{name: inputs[name] for name in settings.inputs}, **settings.args,
                  **{name: batch[name] for name in transform_arguments(fn)}}
        try:
            returned = fn(**kwargs)
        except Exception as err:
            frame = traceback.extract_tb(err.__traceback__)[-1]
            raise RunError(f"{describe(settings, 'transform')} raised {type(err).__name__}: {err} in {when}, at "
                           f"{frame.filename}:{frame.lineno}") from None
        return user_transform_outputs(returned, settings, rollout, when)

    # --- checkpoint state: the adaptive KL coefficient moves ---

    def state_dict(self) -> dict[str, float]:
        return {call_id: float(c.value) for call_id, c in self.kl_controllers.items()}

    def load_state_dict(self, state: dict[str, float]) -> None:
        for call_id, value in state.items():
            controller = self.kl_controllers.get(call_id)
            if isinstance(controller, AdaptiveKLController):
                controller.value = value


def user_transform_outputs(returned: Any, settings: UserFunctionSettings, rollout: Rollout,
                           when: str) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """(outputs by declared name, metrics) from what a declared transform returned: a tensor (one output), a
    tuple or list in the declared order, or a dict by name whose other numeric keys are metrics. Each output
    must be a (batch, response_len) tensor, finite on the tokens trained on; else a RunError saying so."""
    name, declared = describe(settings, "transform"), settings.outputs
    expected = " or ".join((["a tensor"] if len(declared) == 1 else []) +
                           [f"a tuple of {len(declared)} tensors ({', '.join(declared)})", "a dict with those keys"])
    metrics: dict[str, float] = {}
    if isinstance(returned, torch.Tensor):
        values = [returned]
    elif isinstance(returned, (tuple, list)):
        values = list(returned)
    elif isinstance(returned, dict):
        missing = [key for key in declared if key not in returned]
        if missing:
            raise RunError(f"{name} returned a dict without {', '.join(map(repr, missing))} in {when}; it "
                           f"declares outputs = [{', '.join(declared)}]")
        values = [returned[key] for key in declared]
        metrics = {f"transform/{settings.name}/{key}": float(value) for key, value in returned.items()
                   if key not in declared and isinstance(value, (int, float, torch.Tensor)) and
                   (not isinstance(value, torch.Tensor) or value.numel() == 1)}
    else:
        raise RunError(f"{name} returned a {type(returned).__name__} in {when}; expected {expected}")
    if len(values) != len(declared):
        raise RunError(f"{name} returned {len(values)} values in {when}; it declares {len(declared)} outputs "
                       f"({', '.join(declared)}): return {expected}")
    shape = tuple(rollout.responses.shape)
    outputs = {}
    for key, value in zip(declared, values):
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != shape:
            got = f"shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else f"a {type(value).__name__}"
            raise RunError(f"{name} returned `{key}` as {got} in {when}; an output is a tensor of shape (batch, "
                           f"response_len) = {shape}: one value per response token (an outcome value on every "
                           "token of its row, or only on the last)")
        value = value.detach().float().cpu()
        if not torch.isfinite(value[rollout.loss_mask.bool().cpu()]).all():
            raise RunError(f"{name} returned `{key}` with NaN or inf on trained tokens in {when}")
        outputs[key] = value
    return outputs, metrics
