"""Reward shaping and the dynamic-sampling filter of DAPO (Yu et al. 2025), as pure torch functions."""

from __future__ import annotations

import torch


def overlong_penalty(
    token_level_scores: torch.Tensor,
    response_length: torch.Tensor,
    reward_index: torch.Tensor,
    max_new_tokens: int,
    buffer: int,
    penalty_factor: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """DAPO's soft overlong punishment (verl: reward_model.overlong_buffer): a response longer than
    max_new_tokens - buffer gets penalty_factor x (its excess / buffer) subtracted from its reward, so one
    that fills max_new_tokens loses penalty_factor. The penalty goes on each row's reward token.

    token_level_scores (batch, R); response_length (batch,) tokens of each response; reward_index (batch,)
    the column its score sits on. Returns (shaped scores (batch, R), penalty (batch,), <= 0).
    """
    expected = max_new_tokens - buffer
    excess = response_length.to(torch.float64) - expected
    penalty = torch.clamp(-excess / buffer * penalty_factor, max=0.0)  # (batch,)
    shaped = token_level_scores.clone()
    rows = torch.arange(len(shaped), device=shaped.device)
    shaped[rows, reward_index.long()] += penalty.to(shaped.dtype)
    return shaped, penalty


def group_keep_mask(sequence_values: torch.Tensor, uid: list[int]) -> torch.Tensor:
    """DAPO's dynamic-sampling filter (verl: algorithm.filter_groups): True for the rows of each prompt whose
    samples did not all get the same value (a prompt with one sample is kept, as verl keeps it).

    sequence_values (batch,), one value per sample; uid: the prompt of each row. Returns (batch,) bool.
    """
    groups: dict[int, list[int]] = {}
    for row, group in enumerate(uid):
        groups.setdefault(group, []).append(row)
    keep = torch.zeros(len(uid), dtype=torch.bool)
    for rows in groups.values():
        values = sequence_values[rows]
        keep[rows] = len(rows) == 1 or bool((values != values[0]).any())
    return keep
