"""rlgraph/algos/shaping.py against plain-Python references, in float64: DAPO's overlong penalty and its filter."""

import random

import torch

from rlgraph.algos.shaping import group_keep_mask, overlong_penalty


def _reference_penalty(length: int, max_new_tokens: int, buffer: int, factor: float) -> float:
    # verl's DAPORewardManager: min(-(length - (max_len - buffer)) / buffer * factor, 0)
    return min(-(length - (max_new_tokens - buffer)) / buffer * factor, 0.0)


def test_overlong_penalty_is_linear_in_the_buffer_and_sits_on_the_reward_token():
    rng = random.Random(0)
    max_new_tokens, buffer, factor = 12, 4, 0.7
    lengths = [rng.randint(1, max_new_tokens) for _ in range(40)] + [8, 9, 12]  # the buffer's edges too
    scores = torch.zeros(len(lengths), max_new_tokens, dtype=torch.float64)
    reward_index = torch.tensor([length - 1 for length in lengths])
    scores[torch.arange(len(lengths)), reward_index] = torch.tensor([float(rng.random() < 0.5) for _ in lengths],
                                                                    dtype=torch.float64)
    shaped, penalty = overlong_penalty(scores, torch.tensor(lengths), reward_index, max_new_tokens, buffer, factor)
    expected = [_reference_penalty(n, max_new_tokens, buffer, factor) for n in lengths]
    assert penalty.tolist() == expected
    assert penalty[-3:].tolist() == [0.0, -factor / buffer, -factor]  # at the edge, one into the buffer, full
    want = scores.clone()
    for row, (index, value) in enumerate(zip(reward_index.tolist(), expected)):
        want[row, index] += value  # on the reward token only
    torch.testing.assert_close(shaped, want, rtol=0, atol=1e-12)
    assert scores[torch.arange(len(lengths)), reward_index].min() >= 0  # the input is left alone


def test_the_filter_keeps_a_group_unless_all_its_samples_got_the_same_value():
    values = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.5, 0.5, 2.0], dtype=torch.float64)
    uid = [0, 0, 0, 1, 1, 2, 2, 2, 3, 3, 4]  # prompt 4 has one sample: kept, as verl keeps it
    assert group_keep_mask(values, uid).tolist() == [False] * 3 + [True] * 2 + [False] * 3 + [False] * 2 + [True]


def test_the_filter_groups_by_uid_not_by_position():
    rng = random.Random(1)
    uid = [g for g in range(6) for _ in range(4)]
    rng.shuffle(uid)
    values = torch.tensor([float(rng.random() < 0.5) if u % 2 else 1.0 for u in uid], dtype=torch.float64)
    keep = group_keep_mask(values, uid)
    for group in range(6):
        rows = [i for i, u in enumerate(uid) if u == group]
        mixed = len({values[i].item() for i in rows}) > 1
        assert all(keep[i].item() == mixed for i in rows)
