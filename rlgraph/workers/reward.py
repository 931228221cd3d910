"""Rule rewards: a user function `fn(data_source, solution_str, ground_truth, extra_info) -> float`, per sample.

What the function returns must be a finite number (`as_score`), or a dict with one under `score` (verl's
form; its other numeric keys are averaged over the batch, `RewardScores.extras`); a row that gets anything
else (NaN, inf, a string, None) has no usable score. By default that is an error naming the row; `max_invalid_fraction`
lets up to that share of a batch go unscored, and those rows are reported (`RewardScores.valid`) so the
step leaves them out of the update. With `timeout_s` the function runs in a process of its own
(rlgraph/workers/reward_process.py): a row past the timeout, or a function that ends its process, is an
error naming the row instead of a hung or vanished run. `workers` such processes score a batch's rows
at the same time, each row with its own timeout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from rlgraph.workers.batch import Rollout
from rlgraph.workers.reward_process import (RewardFn, RewardFunctionError, RewardPool, RewardProcessError,
                                            BATCH, check_signature, load_reward_fn, score_rows, shown)

__all__ = ["RewardFunctionError", "RewardScores", "RuleReward", "load_reward_fn"]


@dataclass
class RewardScores:
    token_level_scores: torch.Tensor  # (batch, R) float32: each row's score on its reward_index, 0 elsewhere
    valid: torch.Tensor  # (batch,) bool: False where the function gave no usable score (the score is 0 there)
    extras: dict[str, float] = field(default_factory=dict)  # a dict's other numeric keys, each a batch mean
    # how the scores were got (a reward service's requests, retries, latency), by name under reward/NAME/
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def num_invalid(self) -> int:
        return int((~self.valid).sum())


class RuleReward:
    """token_level_scores for a rollout: each sample's score on its `reward_index` column, 0 elsewhere.

    `timeout_s=None` runs the function in this process, without a timeout (tests, benchmarks); the runtime
    always gives one, so a user's function runs in a process of its own.
    """

    def __init__(self, fn: RewardFn | str, *, max_invalid_fraction: float = 0.0, timeout_s: float | None = None,
                 base_dir: str | None = None, batched: bool = False, workers: int = 1) -> None:
        """`base_dir`: the spec's folder, where a relative file path and a module are looked for. `batched`:
        `fn(data_sources, solution_strs, ground_truths, extra_infos)` takes lists and returns a list of scores
        (verl's batch reward), in one call per batch; its `timeout_s` is for that call. `workers`: processes
        that score a batch's rows in parallel (with a `timeout_s`; a batched function uses one)."""
        self.batched = batched
        # loaded here too when given by name, so a missing module or a wrong signature is found before
        # anything starts
        self.base_dir = base_dir
        self.fn = load_reward_fn(fn, base_dir) if isinstance(fn, str) else fn
        self.spec = fn
        if isinstance(fn, str):
            self.name = fn
        else:
            self.name = f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"
        check_signature(self.fn, self.name, batched)
        self.max_invalid_fraction = max_invalid_fraction
        self.timeout_s = timeout_s
        self.workers = workers
        self._process: RewardPool | None = None

    def __getstate__(self) -> dict[str, Any]:
        # a copy in another process starts its own child, and loads a function named by a string itself:
        # one from a file, or from the spec's folder, cannot be unpickled by reference there
        return {**self.__dict__, "_process": None, "fn": None if isinstance(self.spec, str) else self.fn}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.fn is None:
            self.fn = load_reward_fn(self.spec, self.base_dir)

    def close(self) -> None:
        if self._process is not None:
            self._process.close()

    def score(self, rollout: Rollout) -> torch.Tensor:
        """(batch, R) float32 with the score at `rollout.reward_index` of each row (one model turn: its last token)."""
        return self.score_rows(rollout).token_level_scores

    def score_rows(self, rollout: Rollout) -> RewardScores:
        """The scores, and which rows have one; raises RewardFunctionError when the function raises, hangs or
        exits, or when more rows than `max_invalid_fraction` allows get no usable score."""
        rows = list(zip(rollout.data_source, rollout.response_text, rollout.ground_truth, rollout.extra_info))
        if self.timeout_s is None:
            values, error, extras = score_rows(self.fn, rows, batched=self.batched)
        else:
            if self._process is None:
                self._process = RewardPool(self.spec, self.name, self.timeout_s, self.base_dir, self.batched,
                                           self.workers)
            try:
                values, error, extras = self._process.score(rows)
            except RewardProcessError as err:
                where = "" if err.row is None else f" ({describe_row(rollout, err.row)})"
                raise RewardFunctionError(f"{err}{where}") from None
        if error is not None and error[0] == BATCH:
            _, what, line, exc = error
            raise RewardFunctionError(f"batched reward function {self.name} {what} on a batch of {len(rows)} rows"
                                      + (f", at {line}" if line else "")) from exc
        if error is not None:
            row, what, line, exc = error
            raise RewardFunctionError(
                f"reward function {self.name} raised {what} on row {row} ({describe_row(rollout, row)}), at {line}"
            ) from exc
        invalid = [row for row, value in enumerate(values) if isinstance(value, str)]
        if len(invalid) > self.max_invalid_fraction * len(rows):
            row = invalid[0]
            allowed = (f"max_invalid_fraction = {self.max_invalid_fraction:g} allows {int(self.max_invalid_fraction * len(rows))}"
                       if self.max_invalid_fraction else "max_invalid_fraction = 0 allows none")
            raise RewardFunctionError(
                f"reward function {self.name} returned {values[row]} on row {row} ({describe_row(rollout, row)}), "
                f"which is not a usable score (a finite number, or a dict holding one under 'score'); "
                f"{len(invalid)} of {len(rows)} rows had none (rows {_first_rows(invalid)}). {allowed}: fix the function, or raise `max_invalid_fraction` in "
                "the reward's block to leave up to that share of a batch's rows out of the update."
            )
        return scores_of(rollout, values, extras)


def scores_of(rollout: Rollout, values: list[Any], extras: dict[str, list[float]]) -> RewardScores:
    """RewardScores from one value per row: a float, or (no usable score) a string saying what came instead."""
    valid = torch.tensor([not isinstance(v, str) for v in values], dtype=torch.bool)
    numbers = [0.0 if isinstance(v, str) else v for v in values]
    if rollout.episodes is not None:  # a sample whose environment failed gets no reward (and no loss)
        numbers = [0.0 if episode.failed else v for v, episode in zip(numbers, rollout.episodes)]
    token_level_scores = torch.zeros(rollout.responses.shape, dtype=torch.float32)  # (batch, R)
    token_level_scores[torch.arange(len(rollout)), rollout.reward_index.cpu()] = torch.tensor(numbers)
    means = {key: sum(extra) / len(extra) for key, extra in extras.items()}
    return RewardScores(token_level_scores, valid, means)


def describe_row(rollout: Rollout, row: int) -> str:
    """What a user needs to find a row: the prompt it answers and every argument the function got."""
    return (f"uid={rollout.uid[row]}, prompt={shown(rollout.prompt_text[row])}, "
            f"data_source={shown(rollout.data_source[row])}, solution_str={shown(rollout.response_text[row])}, "
            f"ground_truth={shown(rollout.ground_truth[row])}, extra_info={shown(rollout.extra_info[row])}")


def _first_rows(rows: list[int], shown_rows: int = 5) -> str:
    more = f", ... ({len(rows) - shown_rows} more)" if len(rows) > shown_rows else ""
    return ", ".join(map(str, rows[:shown_rows])) + more
