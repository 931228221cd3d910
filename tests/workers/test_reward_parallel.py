"""A rule reward's `workers` processes score a batch's rows at the same time, each row with its own timeout."""

from __future__ import annotations

import time
import uuid

import pytest

from rlgraph.workers.reward import RewardFunctionError, RuleReward

from .test_batch import make_rollout

SLOW = """
import time

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    time.sleep({sleep})
    row = int(ground_truth)
    return {{"score": float(row), "half": row / 2}}
"""
RAISES = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if int(ground_truth) in (2, 3):
        raise ValueError(f"bad row {ground_truth}")
    return 1.0
"""


def reward(tmp_path, text: str, **kwargs) -> RuleReward:
    file = tmp_path / f"reward_{uuid.uuid4().hex[:8]}.py"
    file.write_text(text)
    return RuleReward(f"{file}:compute_score", timeout_s=30.0, **kwargs)


def timed_score(reward: RuleReward):
    started = time.perf_counter()
    result = reward.score_rows(make_rollout())
    return result, time.perf_counter() - started


def test_slow_rows_take_about_the_slowest_not_the_sum(tmp_path):
    """4 rows of 1 s each: 4 s one after another, about 1 s in 4 processes. The bound is half the sum, so a
    busy shared machine does not fail it while scoring in turn (4 s) always would."""
    parallel = reward(tmp_path, SLOW.format(sleep=1.0), workers=4)
    try:
        parallel.score_rows(make_rollout())  # the processes start and load the function once
        result, elapsed = timed_score(parallel)
    finally:
        parallel.close()
    assert elapsed < 2.0, f"4 rows of 1 s took {elapsed:.2f} s with 4 workers"
    # every row's score lands on its own row, and the dict extras are averaged over the whole batch
    assert result.token_level_scores.sum(-1).tolist() == [0.0, 1.0, 2.0, 3.0]
    assert result.extras == {"half": pytest.approx(0.75)}


@pytest.mark.parametrize("workers", [1, 2, 3, 8])  # 8: more processes than rows; only 4 start
def test_any_number_of_workers_gives_the_same_scores(tmp_path, workers):
    scorer = reward(tmp_path, SLOW.format(sleep=0), workers=workers)
    try:
        assert scorer.score(make_rollout()).sum(-1).tolist() == [0.0, 1.0, 2.0, 3.0]
        assert sum(p.proc is not None for p in scorer._process.processes) == min(workers, 4)
    finally:
        scorer.close()


def test_the_first_row_that_raises_is_reported_whichever_process_had_it(tmp_path):
    # with 2 workers, row 2 is in the first process and row 3 in the second: the batch's order decides
    scorer = reward(tmp_path, RAISES, workers=2)
    with pytest.raises(RewardFunctionError, match=r"raised ValueError: bad row 2 on row 2 \(uid=1"):
        scorer.score(make_rollout())
    scorer.close()
