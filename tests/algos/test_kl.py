import math
import random

import pytest
import torch

from rlgraph.algos import KL_KINDS, AdaptiveKLController, FixedKLController, apply_kl_penalty, kl_penalty

from .helpers import SEEDS, assert_close, fill_masked, lengths_for, prefix_mask, randn, rows

BATCH, RESPONSE_LEN = 10, 8
BASE_KINDS = ["k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl"]


def log_probs(seed: int):
    """Log-probs with a few far-apart pairs so that k3's clamps are exercised."""
    gen = torch.Generator().manual_seed(seed)
    ref_log_prob = -randn(gen, BATCH, RESPONSE_LEN).abs()
    log_prob = ref_log_prob + randn(gen, BATCH, RESPONSE_LEN)
    log_prob[0, :3] = ref_log_prob[0, :3] + torch.tensor([-30.0, 25.0, -5.0])
    return log_prob, ref_log_prob


def ref_kl_token(lp: float, ref: float, kind: str) -> float:
    if kind in ("k1", "kl"):
        return lp - ref
    if kind == "abs":
        return abs(lp - ref)
    if kind in ("k2", "mse"):
        return 0.5 * (lp - ref) ** 2
    log_r = min(max(ref - lp, -20.0), 20.0)
    return min(max(math.exp(log_r) - log_r - 1.0, -10.0), 10.0)


def ref_kl(lp: list, ref: list, kind: str) -> list:
    return [[ref_kl_token(a, b, kind) for a, b in zip(lp_row, ref_row)] for lp_row, ref_row in zip(lp, ref)]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", BASE_KINDS)
def test_kl_penalty_matches_reference(seed, kind):
    log_prob, ref_log_prob = log_probs(seed)
    assert_close(kl_penalty(log_prob, ref_log_prob, kind), ref_kl(rows(log_prob), rows(ref_log_prob), kind))


@pytest.mark.parametrize("kind", BASE_KINDS)
def test_plus_kinds_keep_the_value_and_take_the_k2_gradient(kind):
    log_prob, ref_log_prob = log_probs(0)
    log_prob.requires_grad_()
    straight_through = kl_penalty(log_prob, ref_log_prob, kind + "+")
    torch.testing.assert_close(straight_through, kl_penalty(log_prob, ref_log_prob, kind))
    (grad,) = torch.autograd.grad(straight_through.sum(), log_prob)
    assert_close(grad, rows(log_prob - ref_log_prob))  # d/dlp of (lp - ref)^2 / 2


def test_every_listed_kind_is_accepted():
    log_prob, ref_log_prob = log_probs(0)
    for kind in KL_KINDS:
        assert kl_penalty(log_prob, ref_log_prob, kind).shape == log_prob.shape


@pytest.mark.parametrize("kind", ["full", "k4", "k3++", "+", "K3"])
def test_unknown_kind_names_the_allowed_ones(kind):
    log_prob, ref_log_prob = log_probs(0)
    with pytest.raises(ValueError, match="low_var_kl"):
        kl_penalty(log_prob, ref_log_prob, kind)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", ["k1", "k3"])
def test_apply_kl_penalty_matches_reference(seed, kind):
    rng, gen = random.Random(seed), torch.Generator().manual_seed(seed + 50)
    mask = prefix_mask(lengths_for(rng, BATCH, RESPONSE_LEN, empty_row=True), RESPONSE_LEN)
    scores = randn(gen, BATCH, RESPONSE_LEN)
    log_prob, ref_log_prob = log_probs(seed)
    rewards, metrics = apply_kl_penalty(scores, log_prob, ref_log_prob, mask, 0.05, kind)

    kl = ref_kl(rows(log_prob), rows(ref_log_prob), kind)
    expected = [
        [s - 0.05 * k * keep for s, k, keep in zip(s_row, k_row, m_row)]
        for s_row, k_row, m_row in zip(rows(scores), kl, rows(mask))
    ]
    per_seq = []
    for k_row, m_row in zip(kl, rows(mask)):
        kept = [k for k, keep in zip(k_row, m_row) if keep]
        per_seq.append(sum(kept) / len(kept) if kept else 0.0)  # an empty row counts as 0
    assert_close(rewards, expected)
    assert metrics["actor/reward_kl_penalty"] == pytest.approx(sum(per_seq) / len(per_seq), abs=1e-5)
    assert metrics["actor/reward_kl_penalty_coeff"] == 0.05
    assert all(isinstance(value, float) for value in metrics.values())


@pytest.mark.parametrize("fill", [float("nan"), 1e30])
def test_apply_kl_penalty_ignores_masked_positions(fill):
    rng = random.Random(3)
    mask = prefix_mask(lengths_for(rng, BATCH, RESPONSE_LEN), RESPONSE_LEN)
    scores = randn(torch.Generator().manual_seed(3), BATCH, RESPONSE_LEN)
    log_prob, ref_log_prob = log_probs(3)
    clean = apply_kl_penalty(scores, log_prob, ref_log_prob, mask, 0.1, "k3")
    dirty = apply_kl_penalty(*(fill_masked(x, mask, fill) for x in (scores, log_prob, ref_log_prob)), mask, 0.1, "k3")
    assert_close(dirty[0], clean[0].double(), mask)
    assert dirty[1] == clean[1]


def test_fixed_kl_controller_never_moves():
    controller = FixedKLController(0.02)
    controller.update(current_kl=5.0, n_steps=256)
    assert controller.value == 0.02


def test_adaptive_kl_controller_follows_the_formula():
    controller = AdaptiveKLController(init_coef=0.1, target=0.05, horizon=10_000)
    expected = 0.1
    for current_kl, n_steps in [(0.05, 64), (0.06, 64), (0.5, 128), (0.0, 32), (0.045, 256)]:
        controller.update(current_kl, n_steps)
        error = current_kl / 0.05 - 1
        error = 0.2 if error > 0.2 else -0.2 if error < -0.2 else error
        expected = expected * (1 + error * n_steps / 10_000)
        assert controller.value == pytest.approx(expected, rel=1e-12)
    # far above target the step is capped at +20% of n_steps / horizon
    capped = AdaptiveKLController(1.0, 0.01, 100)
    capped.update(10.0, 50)
    assert capped.value == pytest.approx(1.1)
