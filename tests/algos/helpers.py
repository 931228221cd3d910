"""Random inputs and plain float64 reference statistics shared by the algos tests.

References work on nested Python lists of floats with explicit loops, so they share no code (and no
vectorised trick) with the functions under test.
"""

from __future__ import annotations

import math
import random

import numpy as np
import torch

SEEDS = range(5)
TOL = dict(atol=1e-5, rtol=1e-5)


def lengths_for(rng: random.Random, batch: int, response_len: int, empty_row: bool = False) -> list[int]:
    """Response lengths with a full row, a single-token row, early-ending rows and maybe an empty row."""
    lengths = [response_len, 1] + [rng.randint(1, response_len) for _ in range(batch - 2)]
    if empty_row:
        lengths[-1] = 0
    rng.shuffle(lengths)
    return lengths


def prefix_mask(lengths: list[int], response_len: int) -> torch.Tensor:
    return torch.tensor([[1.0 if t < n else 0.0 for t in range(response_len)] for n in lengths])


def scattered_mask(rng: random.Random, batch: int, response_len: int) -> torch.Tensor:
    """Non-prefix masks (holes inside the response, as with tool-output tokens), one row fully set."""
    rows = [[float(rng.random() < 0.6) for _ in range(response_len)] for _ in range(batch)]
    rows[0] = [1.0] * response_len
    return torch.tensor(rows)


def group_labels(rng: random.Random, batch: int, min_size: int = 1) -> list[str]:
    """One prompt id per row; group sizes drawn from min_size..4 (a size-1 group is always present
    when min_size is 1), rows shuffled so that groups are not contiguous."""
    sizes = [1] if min_size == 1 else []
    while sum(sizes) < batch:
        sizes.append(rng.randint(min_size, 4))
    labels = [f"prompt-{g}" for g, size in enumerate(sizes) for _ in range(size)][:batch]
    if min_size > 1 and labels.count(labels[-1]) < min_size:  # truncation left a short last group
        labels = [labels[0] if lab == labels[-1] else lab for lab in labels]
    rng.shuffle(labels)
    return labels


def as_index(labels: list[str], kind: str):
    """The same grouping as a list of strings, list of ints, numpy array or tensor."""
    ints = [int(label.split("-")[1]) for label in labels]
    return {"str": labels, "int": ints, "numpy": np.array(labels), "tensor": torch.tensor(ints)}[kind]


def randn(gen: torch.Generator, batch: int, response_len: int) -> torch.Tensor:
    return torch.randn(batch, response_len, generator=gen)


def fill_masked(x: torch.Tensor, mask: torch.Tensor, value: float) -> torch.Tensor:
    return torch.where(mask.bool(), x, torch.full_like(x, value))


def rows(x: torch.Tensor) -> list:
    return x.double().tolist()


def assert_close(actual: torch.Tensor, expected, mask: torch.Tensor | None = None) -> None:
    """Compare a float32 result to a float64 reference, optionally only where `mask` is set."""
    expected = torch.as_tensor(expected, dtype=torch.float64)
    actual = actual.double()
    if mask is not None:
        actual, expected = actual[mask.bool()], expected[mask.bool()]
    torch.testing.assert_close(actual, expected, **TOL)


# --- float64 reference statistics ---


def ref_masked_mean(x: list, m: list) -> float:
    total, count = 0.0, 0.0
    for x_row, m_row in zip(x, m):
        for value, keep in zip(x_row, m_row):
            if keep:
                total += value
                count += 1.0
    return total / (count + 1e-8)


def ref_masked_var(x: list, m: list) -> float:
    mean = ref_masked_mean(x, m)
    squares, count = 0.0, 0
    for x_row, m_row in zip(x, m):
        for value, keep in zip(x_row, m_row):
            if keep:
                squares += (value - mean) ** 2
                count += 1
    return squares / (count + 1e-8) * count / (count - 1)


def ref_whiten(x: list, m: list) -> list:
    mean, var = ref_masked_mean(x, m), ref_masked_var(x, m)
    return [[(value - mean) / math.sqrt(var + 1e-8) for value in x_row] for x_row in x]


def ref_agg(loss_mat: list, m: list, mode: str):
    """Works on floats and on 0-d float64 tensors alike, so the loss tests can take its gradient."""
    seq_sums, seq_means, total = [], [], 0.0
    for x_row, m_row in zip(loss_mat, m):
        row_sum = sum(x for x, keep in zip(x_row, m_row) if keep)
        count = sum(1 for keep in m_row if keep)
        total += row_sum
        if count:  # sequences without tokens do not count in a seq-mean
            seq_sums.append(row_sum)
            seq_means.append(row_sum / count)
    if mode == "token-mean":
        return ref_masked_mean(loss_mat, m)
    if mode == "seq-mean-token-sum":
        return sum(seq_sums) / len(seq_sums)
    if mode == "seq-mean-token-mean":
        return sum(seq_means) / len(seq_means)
    return total / len(loss_mat[0])
