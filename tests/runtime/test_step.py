"""rlgraph/runtime/step.py `pick_samples`: which rows of a step samples.jsonl shows."""

from __future__ import annotations

import random

from rlgraph.runtime.step import pick_samples

N = 4  # samples per prompt
UID = [prompt for prompt in range(8) for _ in range(N)]  # 8 prompts, their groups one after the other


def test_samples_are_of_different_prompts_and_of_any_sample_of_a_group_drawn_by_seed():
    picks = [pick_samples(UID, None, 4, random.Random(seed)) for seed in range(20)]
    assert all(len(p) == 4 and len({UID[i] for i in p}) == 4 for p in picks)  # four prompts each time
    assert pick_samples(UID, None, 4, random.Random(3)) == picks[3]  # the same seed, the same rows
    assert {i % N for p in picks for i in p} == set(range(N))  # not only each group's first sample
    assert len({tuple(p) for p in picks}) > 1 and any(set(p) != {0, 8, 16, 24} for p in picks)


def test_every_outcome_of_the_batch_is_shown_even_a_rare_one():
    outcomes = ["no tool call"] * len(UID)
    outcomes[13], outcomes[30], outcomes[5] = "tool called", "failed", "tool error"
    for seed in range(20):
        picked = pick_samples(UID, outcomes, 4, random.Random(seed))
        assert {13, 30, 5} <= set(picked) and len(picked) == 4
        assert {outcomes[i] for i in picked} == {"no tool call", "tool called", "failed", "tool error"}
        assert len({UID[i] for i in picked}) == 4  # still four prompts (rows 5 and 13 are prompts 1 and 3)


def test_more_outcomes_than_rows_shows_each_and_fewer_prompts_than_rows_fills_from_their_groups():
    outcomes = ["no tool call", "tool called", "tool error", "failed", "no tool call", "tool called", "x", "y"]
    assert len(pick_samples(UID[:8], outcomes, 4, random.Random(0))) == 6  # each of six outcomes once
    picked = pick_samples([0, 0, 0, 1, 1, 1], None, 4, random.Random(0))
    assert len(set(picked)) == 4 and {0, 1} <= {[0, 0, 0, 1, 1, 1][i] for i in picked}
