import random

import pytest
import torch

from rlgraph.algos import AGG_MODES, agg_loss, masked_mean, masked_var, masked_whiten

from .helpers import (
    SEEDS,
    assert_close,
    fill_masked,
    lengths_for,
    prefix_mask,
    randn,
    ref_agg,
    ref_masked_mean,
    ref_masked_var,
    ref_whiten,
    rows,
    scattered_mask,
)

BATCH, RESPONSE_LEN = 10, 8


def inputs(seed: int, scattered: bool = False, empty_row: bool = False):
    rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    if scattered:
        mask = scattered_mask(rng, BATCH, RESPONSE_LEN)
    else:
        mask = prefix_mask(lengths_for(rng, BATCH, RESPONSE_LEN, empty_row), RESPONSE_LEN)
    return randn(gen, BATCH, RESPONSE_LEN) * 3 + 1, mask


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("scattered", [False, True])
def test_masked_stats_match_reference(seed, scattered):
    x, mask = inputs(seed, scattered)
    assert_close(masked_mean(x, mask), ref_masked_mean(rows(x), rows(mask)))
    assert_close(masked_var(x, mask), ref_masked_var(rows(x), rows(mask)))
    assert_close(masked_whiten(x, mask), ref_whiten(rows(x), rows(mask)))


@pytest.mark.parametrize("seed", SEEDS)
def test_masked_mean_along_dim(seed):
    x, mask = inputs(seed, empty_row=True)
    expected = [ref_masked_mean([x_row], [m_row]) for x_row, m_row in zip(rows(x), rows(mask))]
    assert_close(masked_mean(x, mask, dim=-1), expected)


def test_masked_var_biased_and_too_few_tokens():
    x, mask = inputs(0)
    n = mask.sum().item()
    assert_close(masked_var(x, mask, unbiased=False), ref_masked_var(rows(x), rows(mask)) * (n - 1) / n)
    one_token = torch.zeros_like(mask)
    one_token[0, 0] = 1
    with pytest.raises(ValueError, match="at least 2"):
        masked_var(x, one_token)


def test_mask_dtype_does_not_matter():
    x, mask = inputs(1)
    expected = masked_whiten(x, mask)
    for other in (mask.bool(), mask.long()):
        torch.testing.assert_close(masked_whiten(x, other), expected)
        torch.testing.assert_close(agg_loss(x, other, "seq-mean-token-mean"), agg_loss(x, mask, "seq-mean-token-mean"))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", AGG_MODES)
def test_agg_loss_matches_reference(seed, mode):
    x, mask = inputs(seed, empty_row=True)
    assert_close(agg_loss(x, mask, mode), ref_agg(rows(x), rows(mask), mode))


def test_agg_loss_unknown_mode_lists_modes():
    x, mask = inputs(0)
    with pytest.raises(ValueError, match="seq-mean-token-sum-norm"):
        agg_loss(x, mask, "token-sum")


@pytest.mark.parametrize("fill", [float("nan"), 1e30, -1e30])
@pytest.mark.parametrize("scattered", [False, True])
def test_masked_positions_do_not_leak(fill, scattered):
    x, mask = inputs(3, scattered, empty_row=not scattered)
    dirty = fill_masked(x, mask, fill)
    torch.testing.assert_close(masked_mean(dirty, mask), masked_mean(x, mask))
    torch.testing.assert_close(masked_mean(dirty, mask, dim=-1), masked_mean(x, mask, dim=-1))
    torch.testing.assert_close(masked_var(dirty, mask), masked_var(x, mask))
    assert_close(masked_whiten(dirty, mask), masked_whiten(x, mask).double(), mask)
    for mode in AGG_MODES:
        torch.testing.assert_close(agg_loss(dirty, mask, mode), agg_loss(x, mask, mode))


def test_agg_loss_gradient_is_zero_off_mask():
    x, mask = inputs(2, empty_row=True)
    x = fill_masked(x, mask, float("nan")).requires_grad_()
    for mode in AGG_MODES:
        (grad,) = torch.autograd.grad(agg_loss(x, mask, mode), x)
        assert torch.all(grad[mask == 0] == 0) and torch.isfinite(grad).all()
