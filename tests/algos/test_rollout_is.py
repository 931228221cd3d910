"""Truncated importance sampling (rlgraph/algos/rollout_is.py) and its place in each policy loss, against
plain-Python float64 references."""

import math
import random

import pytest
import torch

from rlgraph.algos import AGG_MODES, cispo_policy_loss, gspo_policy_loss, policy_loss, rollout_is_weights

from . import test_losses
from .helpers import SEEDS, assert_close, fill_masked, lengths_for, prefix_mask, randn, ref_agg, rows
from .test_losses import CLIP_C, CLIP_HIGH, CLIP_LOW, grad_of, leaf64

BATCH, RESPONSE_LEN = 10, 8
CAP = 2.0
LEVELS = ("token", "sequence")


def batch(seed: int):
    """Trainer and rollout log-probs apart enough that the cap truncates some weights, at both levels."""
    rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    mask = prefix_mask(lengths_for(rng, BATCH, RESPONSE_LEN, empty_row=True), RESPONSE_LEN)
    old_log_prob = -randn(gen, BATCH, RESPONSE_LEN).abs()
    rollout_log_prob = old_log_prob + 0.4 * randn(gen, BATCH, RESPONSE_LEN)
    return old_log_prob, rollout_log_prob, mask


# --- float64 references ---


def ref_weights(old: list, mu: list, m: list, level: str, cap: float):
    """(weights table, the untruncated weights that count in the metrics)."""
    weights, counted = [], []
    for old_row, mu_row, m_row in zip(old, mu, m):
        kept = [o - u for o, u, keep in zip(old_row, mu_row, m_row) if keep]
        if level == "token":
            raw_row = [math.exp(min(max(o - u, -20.0), 20.0)) for o, u in zip(old_row, mu_row)]
            counted += [r for r, keep in zip(raw_row, m_row) if keep]
        else:
            raw = math.exp(min(max(sum(kept), -20.0), 20.0))  # the product of the token ratios
            raw_row = [raw] * len(old_row)
            counted += [raw] if kept else []
        weights.append([min(r, cap) if keep else 0.0 for r, keep in zip(raw_row, m_row)])
    return weights, counted


def ref_metrics(old: list, mu: list, m: list, counted: list, cap: float) -> dict:
    kl, k3, diffs = [], [], []
    for old_row, mu_row, m_row in zip(old, mu, m):
        for o, u, keep in zip(old_row, mu_row, m_row):
            if keep:
                kl.append(u - o)
                k3.append(math.exp(o - u) - (o - u) - 1)
                diffs.append(abs(math.exp(u) - math.exp(o)))
    return {
        "mismatch/rollout_is_mean": sum(counted) / len(counted),
        "mismatch/rollout_is_max": max(counted),
        "mismatch/rollout_is_min": min(counted),
        "mismatch/rollout_is_ratio_fraction_high": sum(w > cap for w in counted) / len(counted),
        "mismatch/mismatch_kl": sum(kl) / len(kl),
        "mismatch/mismatch_k3_kl": sum(k3) / len(k3),
        "training/rollout_probs_diff_max": max(diffs),
        "training/rollout_probs_diff_mean": sum(diffs) / len(diffs),
    }


# --- the weights ---


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("level", LEVELS)
def test_weights_and_metrics_match_reference(seed, level):
    old, mu, mask = batch(seed)
    weights, metrics = rollout_is_weights(old, mu, mask, level, CAP)
    want, counted = ref_weights(rows(old), rows(mu), rows(mask), level, CAP)
    assert_close(weights, want)
    assert metrics.keys() == ref_metrics(rows(old), rows(mu), rows(mask), counted, CAP).keys()
    for name, value in ref_metrics(rows(old), rows(mu), rows(mask), counted, CAP).items():
        assert isinstance(metrics[name], float)
        assert metrics[name] == pytest.approx(value, rel=1e-5, abs=1e-6), name


@pytest.mark.parametrize("level", LEVELS)
def test_the_cap_truncates_on_these_inputs(level):
    old, mu, mask = batch(0)
    weights, metrics = rollout_is_weights(old, mu, mask, level, CAP)
    assert 0 < metrics["mismatch/rollout_is_ratio_fraction_high"] < 1
    assert metrics["mismatch/rollout_is_max"] > CAP and weights.max().item() == CAP


def test_weights_by_hand():
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    old = torch.log(torch.tensor([[0.5, 0.5, 0.5]]))
    mu = torch.log(torch.tensor([[0.1, 0.4, 0.9]]))  # ratios 5, 1.25; the third token is not trained on
    token, metrics = rollout_is_weights(old, mu, mask, "token", 2.0)
    torch.testing.assert_close(token, torch.tensor([[2.0, 1.25, 0.0]]))
    assert metrics["mismatch/rollout_is_max"] == pytest.approx(5.0)
    assert metrics["mismatch/rollout_is_ratio_fraction_high"] == 0.5
    sequence, metrics = rollout_is_weights(old, mu, mask, "sequence", 10.0)  # 5 * 1.25 = 6.25
    torch.testing.assert_close(sequence, torch.tensor([[6.25, 6.25, 0.0]]))
    assert metrics["mismatch/rollout_is_mean"] == pytest.approx(6.25)


@pytest.mark.parametrize("fill", [float("nan"), 1e30])
@pytest.mark.parametrize("level", LEVELS)
def test_masked_positions_are_ignored(fill, level):
    old, mu, mask = batch(1)
    clean = rollout_is_weights(old, mu, mask, level, CAP)
    dirty = rollout_is_weights(fill_masked(old, mask, fill), fill_masked(mu, mask, -fill), mask, level, CAP)
    assert torch.equal(dirty[0], clean[0]) and dirty[1] == clean[1]
    assert torch.all(clean[0][mask == 0] == 0)


def test_every_level_a_spec_may_name_is_implemented():
    # `check` validates `tis = ...` against its own list (it cannot import torch)
    from rlgraph.algos import TIS_LEVELS
    from rlgraph.compiler.builtins import ROLE_METHODS

    assert ROLE_METHODS["actor"]["update"].kwargs["tis"].type.options == TIS_LEVELS == ("off", *LEVELS)


def test_bad_level_and_cap_are_clear_errors():
    old, mu, mask = batch(0)
    with pytest.raises(ValueError, match="unknown TIS level 'geometric'"):
        rollout_is_weights(old, mu, mask, "geometric", CAP)
    with pytest.raises(ValueError, match="cap must be >= 1"):
        rollout_is_weights(old, mu, mask, "token", 0.5)


# --- applied in each policy loss: every token's loss times its weight, before aggregation ---

LOSSES = {  # loss function, its float64 reference in test_losses, extra arguments
    "vanilla": (policy_loss, test_losses.ref_policy_loss, {"clip_c": CLIP_C}),
    "gspo": (gspo_policy_loss, test_losses.ref_gspo_loss, {}),
    "cispo": (cispo_policy_loss, test_losses.ref_cispo_loss, {}),
}


@pytest.mark.parametrize("seed", SEEDS[:3])
@pytest.mark.parametrize("mode", AGG_MODES)
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("loss", LOSSES)
def test_weighted_policy_losses_match_reference(monkeypatch, seed, mode, level, loss):
    loss_fn, reference, extra = LOSSES[loss]
    old, lp, adv, mask = test_losses.batch(seed)
    if loss == "gspo":
        lp = old + 0.05 * (lp - old)  # sequence ratios near 1, as test_losses does for GSPO
    lp = lp.requires_grad_()
    mu = old + 0.4 * randn(torch.Generator().manual_seed(seed + 100), *old.shape)
    weights, _ = rollout_is_weights(old, mu, mask, level, CAP)
    loss_value, metrics = loss_fn(old, lp, adv, mask, CLIP_LOW, CLIP_HIGH, agg=mode, rollout_is_weights=weights,
                                  **extra)

    # The references aggregate their per-token losses with ref_agg: weigh each token there, in float64.
    ref_w, _ = ref_weights(rows(old), rows(mu), rows(mask), level, CAP)
    monkeypatch.setattr(test_losses, "ref_agg", lambda table, m, agg: ref_agg(
        [[cell * w for cell, w in zip(row, w_row)] for row, w_row in zip(table, ref_w)], m, agg))
    leaf, lp64 = leaf64(lp)
    ref_loss, ref_metric_values = reference(rows(old), lp64, rows(adv), rows(mask), mode)
    assert_close(loss_value, ref_loss.item())
    assert_close(grad_of(loss_value, lp), grad_of(ref_loss, leaf))
    test_losses.assert_metrics(metrics, ref_metric_values)  # clip statistics are the unweighted ones


@pytest.mark.parametrize("loss", LOSSES)
def test_unit_weights_leave_every_loss_bit_identical(loss):
    loss_fn, _, extra = LOSSES[loss]
    old, lp, adv, mask = test_losses.batch(0)
    weights, _ = rollout_is_weights(old, old.clone(), mask, "token", CAP)
    plain = loss_fn(old, lp, adv, mask, CLIP_LOW, CLIP_HIGH, **extra)
    weighted = loss_fn(old, lp, adv, mask, CLIP_LOW, CLIP_HIGH, rollout_is_weights=weights, **extra)
    assert torch.equal(plain[0], weighted[0]) and plain[1] == weighted[1]


@pytest.mark.parametrize("loss", LOSSES)
def test_no_gradient_flows_into_the_weights(loss):
    loss_fn, _, extra = LOSSES[loss]
    old, lp, adv, mask = test_losses.batch(1)
    weights = torch.full_like(old, 1.5).requires_grad_()
    value, _ = loss_fn(old, lp.requires_grad_(), adv, mask, CLIP_LOW, CLIP_HIGH, rollout_is_weights=weights, **extra)
    assert not torch.autograd.grad(value, [lp, weights], allow_unused=True)[1]
