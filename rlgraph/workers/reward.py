"""Rule rewards: a user function `fn(data_source, solution_str, ground_truth, extra_info) -> float`, per sample."""

from __future__ import annotations

import importlib
from typing import Callable

import torch

from rlgraph.workers.batch import Rollout

RewardFn = Callable[..., float]


class RewardFunctionError(Exception):
    """A reward function could not be loaded, or raised / returned something unusable for a sample."""


def load_reward_fn(spec: str) -> RewardFn:
    """Import `"package.module:function"` and return the function."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise RewardFunctionError(
            f"reward function {spec!r} must be written as 'module:function', e.g. 'rlgraph.tasks.arith:exact_match'"
        )
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        raise RewardFunctionError(f"reward function {spec!r}: module {module_name!r} not found ({err})") from err
    except Exception as err:
        raise RewardFunctionError(
            f"reward function {spec!r}: importing module {module_name!r} failed with {type(err).__name__}: {err}"
        ) from err
    fn = module
    for part in attr.split("."):
        if not hasattr(fn, part):
            raise RewardFunctionError(f"reward function {spec!r}: module {module_name!r} has no attribute {attr!r}")
        fn = getattr(fn, part)
    if not callable(fn):
        raise RewardFunctionError(
            f"reward function {spec!r}: {module_name}.{attr} is a {type(fn).__name__}, not callable"
        )
    return fn


class RuleReward:
    """token_level_scores for a rollout: each sample's score on its `reward_index` column, 0 elsewhere."""

    def __init__(self, fn: RewardFn | str) -> None:
        self.fn = load_reward_fn(fn) if isinstance(fn, str) else fn
        if isinstance(fn, str):
            self.name = fn
        else:
            self.name = f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"

    def score(self, rollout: Rollout) -> torch.Tensor:
        """(batch, R) float32 with the score at `rollout.reward_index` of each row (one model turn: its last token)."""
        scores = torch.tensor([self.score_row(rollout, row) for row in range(len(rollout))], dtype=torch.float32)
        token_level_scores = torch.zeros(rollout.responses.shape, dtype=torch.float32)  # (batch, R)
        token_level_scores[torch.arange(len(rollout)), rollout.reward_index.cpu()] = scores
        return token_level_scores

    def score_row(self, rollout: Rollout, row: int) -> float:
        args = (
            rollout.data_source[row],
            rollout.response_text[row],
            rollout.ground_truth[row],
            rollout.extra_info[row],
        )
        try:
            value = self.fn(*args)
        except Exception as err:
            raise RewardFunctionError(
                f"reward function {self.name} raised {type(err).__name__}: {err} on row {row} "
                f"(data_source={args[0]!r}, solution_str={args[1]!r}, ground_truth={args[2]!r}, "
                f"extra_info={args[3]!r})"
            ) from err
        try:
            return float(value)
        except (TypeError, ValueError) as err:
            raise RewardFunctionError(
                f"reward function {self.name} returned {value!r} on row {row}, not a number "
                f"(data_source={args[0]!r}, solution_str={args[1]!r}, ground_truth={args[2]!r})"
            ) from err
