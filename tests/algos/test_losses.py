import math
import random

import pytest
import torch

from rlgraph.algos import (
    AGG_MODES,
    cispo_policy_loss,
    entropy_from_logits,
    entropy_loss,
    gspo_policy_loss,
    policy_loss,
    value_loss,
)

from .helpers import SEEDS, assert_close, fill_masked, lengths_for, prefix_mask, randn, ref_agg, rows

BATCH, RESPONSE_LEN, VOCAB = 10, 8, 7
CLIP_LOW, CLIP_HIGH, CLIP_C = 0.2, 0.28, 3.0


def batch(seed: int):
    """Log-probs far enough from the old ones that both clips and the dual clip fire."""
    rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    mask = prefix_mask(lengths_for(rng, BATCH, RESPONSE_LEN, empty_row=True), RESPONSE_LEN)
    old_log_prob = -randn(gen, BATCH, RESPONSE_LEN).abs()
    log_prob = old_log_prob + randn(gen, BATCH, RESPONSE_LEN)
    advantages = randn(gen, BATCH, RESPONSE_LEN)
    return old_log_prob, log_prob, advantages, mask


def leaf64(x: torch.Tensor) -> list:
    """Rows of 0-d float64 tensors that carry gradients back to one float64 leaf."""
    leaf = x.detach().double().requires_grad_()
    return leaf, [[leaf[i, t] for t in range(x.shape[1])] for i in range(x.shape[0])]


def grad_of(loss: torch.Tensor, leaf: torch.Tensor) -> torch.Tensor:
    (grad,) = torch.autograd.grad(loss, leaf)
    return grad


def per_token(token_fn, *tables) -> list:
    """token_fn applied at every (row, t) of equally shaped nested lists: rows of result tuples."""
    return [[token_fn(*cells) for cells in zip(*row_cells)] for row_cells in zip(*tables)]


def column(table: list, k: int) -> list:
    return [[cell[k] for cell in row] for row in table]


def frac(flags: list, m: list) -> float:
    kept = [flag for f_row, m_row in zip(flags, m) for flag, keep in zip(f_row, m_row) if keep]
    return sum(kept) / len(kept)


# --- float64 references, token by token ---


def ref_clipped(ratio, a):
    """PPO's pessimistic objective for one token and whether the clipped branch won."""
    unclipped = -a * ratio
    clipped = -a * min(max(ratio, 1 - CLIP_LOW), 1 + CLIP_HIGH)
    return max(unclipped, clipped), float(clipped > unclipped)


def ref_policy_loss(old, lp, adv, m, mode):
    def token(old_t, lp_t, a):
        log_ratio = torch.clamp(lp_t - old_t, -20.0, 20.0)
        loss, clipped = ref_clipped(torch.exp(log_ratio), a)
        dual = a < 0 and loss > -a * CLIP_C
        if a < 0:
            loss = min(loss, -a * CLIP_C)
        return loss, clipped, float(dual), -log_ratio.item()

    table = per_token(token, old, lp, adv)
    metrics = {
        "actor/pg_clipfrac": frac(column(table, 1), m),
        "actor/pg_clipfrac_lower": frac(column(table, 2), m),
        "actor/ppo_kl": frac(column(table, 3), m),
    }
    return ref_agg(column(table, 0), m, mode), metrics


def ref_gspo_loss(old, lp, adv, m, mode):
    seq_log_ratios = []
    for old_row, lp_row, m_row in zip(old, lp, m):
        kept = [lp_t.item() - old_t for old_t, lp_t, keep in zip(old_row, lp_row, m_row) if keep]
        seq_log_ratios.append([sum(kept) / len(kept) if kept else 0.0] * len(old_row))

    def token(seq_log_ratio, old_t, lp_t, a):
        # value exp(seq_log_ratio); gradient through this token's own log-prob only
        ratio = torch.exp(torch.clamp(seq_log_ratio + lp_t - lp_t.detach(), max=10.0))
        loss, clipped = ref_clipped(ratio, a)
        return loss, clipped, old_t - lp_t.item()

    table = per_token(token, seq_log_ratios, old, lp, adv)
    metrics = {
        "actor/pg_clipfrac": frac(column(table, 1), m),
        "actor/pg_clipfrac_lower": 0.0,
        "actor/ppo_kl": frac(column(table, 2), m),
    }
    return ref_agg(column(table, 0), m, mode), metrics


def ref_value_loss(v, ret, old_v, m, clip, mode):
    def token(v_t, r_t, o_t):
        v_clipped = min(max(v_t, o_t - clip), o_t + clip)
        plain, clipped = (v_t - r_t) ** 2, (v_clipped - r_t) ** 2
        return max(plain, clipped), float(clipped > plain)

    table = per_token(token, v, ret, old_v)
    return 0.5 * ref_agg(column(table, 0), m, mode), {"critic/vf_clipfrac": frac(column(table, 1), m)}


def ref_entropy(logits: list) -> float:
    top = max(logits)
    log_z = top + math.log(sum(math.exp(z - top) for z in logits))
    return -sum(math.exp(z - log_z) * (z - log_z) for z in logits)


def assert_metrics(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key in want:
        assert isinstance(got[key], float), key
        assert got[key] == pytest.approx(want[key], abs=1e-5), key


# --- agreement with the references: value, metrics and gradient ---


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", AGG_MODES)
def test_policy_loss_matches_reference(seed, mode):
    old, lp, adv, mask = batch(seed)
    lp = lp.requires_grad_()
    loss, metrics = policy_loss(old, lp, adv, mask, CLIP_LOW, CLIP_HIGH, CLIP_C, agg=mode)
    leaf, lp64 = leaf64(lp)
    ref_loss, ref_metrics = ref_policy_loss(rows(old), lp64, rows(adv), rows(mask), mode)
    assert_close(loss, ref_loss.item())
    assert_metrics(metrics, ref_metrics)
    assert_close(grad_of(loss, lp), grad_of(ref_loss, leaf))


def test_policy_loss_clips_fire_on_these_inputs():
    old, lp, adv, mask = batch(0)
    _, metrics = policy_loss(old, lp, adv, mask, CLIP_LOW, CLIP_HIGH, CLIP_C)
    assert metrics["actor/pg_clipfrac"] > 0 and metrics["actor/pg_clipfrac_lower"] > 0


def test_dual_clip_caps_a_negative_advantage_by_hand():
    one = torch.ones(1, 1)
    # ratio e^2 ~ 7.39 with A = -1: PPO's max picks 7.39, the dual clip caps it at clip_c = 3.
    loss, metrics = policy_loss(0 * one, 2 * one, -one, one, 0.2, 0.2, clip_c=3.0)
    assert loss.item() == pytest.approx(3.0)
    assert metrics["actor/pg_clipfrac_lower"] == 1.0
    loss, _ = policy_loss(0 * one, 2 * one, one, one, 0.2, 0.2, clip_c=3.0)
    assert loss.item() == pytest.approx(-1.2)  # A > 0: clipped at 1 + clip_high


@pytest.mark.parametrize("clip_c", [1.0, 0.5])
def test_policy_loss_rejects_dual_clip_at_most_one(clip_c):
    old, lp, adv, mask = batch(0)
    with pytest.raises(ValueError, match="clip_c must be > 1"):
        policy_loss(old, lp, adv, mask, CLIP_LOW, CLIP_HIGH, clip_c)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", AGG_MODES)
def test_gspo_loss_matches_reference(seed, mode):
    old, lp, adv, mask = batch(seed)
    # Sequence ratios near 1, as in practice. Advantages vary per token (GSPO-token), which is what
    # separates the token-level gradient form from differentiating through the sequence mean.
    lp = (old + 0.05 * (lp - old)).requires_grad_()
    loss, metrics = gspo_policy_loss(old, lp, adv, mask, CLIP_LOW, CLIP_HIGH, agg=mode)
    leaf, lp64 = leaf64(lp)
    ref_loss, ref_metrics = ref_gspo_loss(rows(old), lp64, rows(adv), rows(mask), mode)
    assert_close(loss, ref_loss.item())
    assert_metrics(metrics, ref_metrics)
    assert_close(grad_of(loss, lp), grad_of(ref_loss, leaf))


def test_gspo_with_sequence_advantages_is_the_sequence_level_objective():
    # With one advantage per sequence, GSPO-token's gradient equals that of the plain sequence-level
    # objective -A_i * s_i(theta), differentiated through the mean log-ratio (Zheng et al. 2025, sec. 4.3).
    old, lp, adv, mask = batch(1)
    lp = (old + 0.05 * (lp - old)).requires_grad_()
    adv = adv[:, :1].expand_as(adv).contiguous()
    loss, _ = gspo_policy_loss(old, lp, adv, mask, 1e9, 1e9, agg="seq-mean-token-mean")
    has_tokens = mask.sum(-1) > 0
    seq_ratio = torch.exp((lp - old).mul(mask).sum(-1)[has_tokens] / mask.sum(-1)[has_tokens])
    sequence_loss = (-adv[has_tokens, 0] * seq_ratio).mean()
    torch.testing.assert_close(loss, sequence_loss)
    torch.testing.assert_close(grad_of(loss, lp), grad_of(sequence_loss, lp))


@pytest.mark.parametrize("loss_fn", [policy_loss, gspo_policy_loss, cispo_policy_loss])
def test_zero_advantage_gives_zero_policy_gradient(loss_fn):
    old, lp, adv, mask = batch(2)
    lp = lp.requires_grad_()
    loss, _ = loss_fn(old, lp, torch.zeros_like(adv), mask, CLIP_LOW, CLIP_HIGH)
    assert torch.all(grad_of(loss, lp) == 0)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", AGG_MODES)
def test_value_loss_matches_reference(seed, mode):
    old_values, vpreds, returns, mask = batch(seed)
    vpreds = vpreds.requires_grad_()
    loss, metrics = value_loss(vpreds, returns, old_values, mask, clip=0.5, agg=mode)
    leaf, v64 = leaf64(vpreds)
    ref_loss, ref_metrics = ref_value_loss(v64, rows(returns), rows(old_values), rows(mask), 0.5, mode)
    assert_close(loss, ref_loss.item())
    assert_metrics(metrics, ref_metrics)
    assert_close(grad_of(loss, vpreds), grad_of(ref_loss, leaf))


@pytest.mark.parametrize("seed", SEEDS)
def test_entropy_matches_reference(seed):
    _, _, _, mask = batch(seed)
    logits = 3 * torch.randn(BATCH, RESPONSE_LEN, VOCAB, generator=torch.Generator().manual_seed(seed))
    per_token = [[ref_entropy(position) for position in row] for row in logits.double().tolist()]
    assert_close(entropy_from_logits(logits), per_token)
    for mode in AGG_MODES:
        assert_close(entropy_loss(logits, mask, mode), ref_agg(per_token, rows(mask), mode))


def test_entropy_bounds():
    uniform = torch.zeros(2, VOCAB)
    certain = torch.tensor([[50.0] + [0.0] * (VOCAB - 1)])
    assert_close(entropy_from_logits(uniform), [math.log(VOCAB)] * 2)
    assert entropy_from_logits(certain).item() == pytest.approx(0.0, abs=1e-5)


# --- nothing outside the mask matters ---


@pytest.mark.parametrize("fill", [float("nan"), 1e30])
@pytest.mark.parametrize("mode", AGG_MODES)
def test_masked_positions_do_not_leak(fill, mode):
    old, lp, adv, mask = batch(4)
    clip = dict(clip_low=CLIP_LOW, clip_high=CLIP_HIGH)
    cases = [  # (loss, which input to differentiate, keyword arguments)
        (policy_loss, 1, dict(clip, clip_c=CLIP_C, agg=mode)),
        (gspo_policy_loss, 1, dict(clip, agg=mode)),
        (cispo_policy_loss, 1, dict(clip, agg=mode)),
        (value_loss, 0, dict(clip=0.5, agg=mode)),
    ]
    for loss_fn, wrt, kwargs in cases:
        results = []
        for tensors in ((old, lp, adv), tuple(fill_masked(x, mask, fill) for x in (old, lp, adv))):
            tensors = [x.clone().requires_grad_(i == wrt) for i, x in enumerate(tensors)]
            loss, metrics = loss_fn(*tensors, mask, **kwargs)
            results.append((loss, metrics, grad_of(loss, tensors[wrt])))
        (clean_loss, clean_metrics, clean_grad), (loss, metrics, grad) = results
        torch.testing.assert_close(loss, clean_loss)
        assert metrics == clean_metrics
        torch.testing.assert_close(grad, clean_grad)  # equal inside the mask, exactly 0 outside
        assert torch.all(grad[mask == 0] == 0)

    logits = torch.randn(BATCH, RESPONSE_LEN, VOCAB, generator=torch.Generator().manual_seed(4))
    dirty_logits = torch.where(mask.bool()[..., None], logits, torch.full_like(logits, fill))
    torch.testing.assert_close(entropy_loss(dirty_logits, mask, mode), entropy_loss(logits, mask, mode))


# --- CISPO ---


def ref_cispo_loss(old, lp, adv, m, mode):
    def token(old_t, lp_t, a):
        log_ratio = min(max(lp_t.item() - old_t, -20.0), 20.0)
        ratio = math.exp(log_ratio)  # a plain float: no gradient flows through the weight
        weight = min(max(ratio, 1 - CLIP_LOW), 1 + CLIP_HIGH)
        return -weight * a * lp_t, float(weight != ratio), -log_ratio

    table = per_token(token, old, lp, adv)
    metrics = {
        "actor/pg_clipfrac": frac(column(table, 1), m),
        "actor/pg_clipfrac_lower": 0.0,
        "actor/ppo_kl": frac(column(table, 2), m),
    }
    return ref_agg(column(table, 0), m, mode), metrics


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", AGG_MODES)
def test_cispo_loss_matches_reference(seed, mode):
    old, lp, adv, mask = batch(seed)
    lp = lp.requires_grad_()
    loss, metrics = cispo_policy_loss(old, lp, adv, mask, CLIP_LOW, CLIP_HIGH, agg=mode)
    leaf, lp64 = leaf64(lp)
    ref_loss, ref_metrics = ref_cispo_loss(rows(old), lp64, rows(adv), rows(mask), mode)
    assert metrics["actor/pg_clipfrac"] > 0  # both the clipped and the in-range branch are compared
    assert_close(loss, ref_loss.item())
    assert_metrics(metrics, ref_metrics)
    assert_close(grad_of(loss, lp), grad_of(ref_loss, leaf))


@pytest.mark.parametrize("advantage", [1.0, -1.0])
def test_cispo_keeps_the_gradient_of_a_clipped_token_that_ppo_drops(advantage):
    one = torch.ones(1, 1)
    # ratio e^1 ~ 2.72 > 1 + 0.28 with A > 0, and e^-1 ~ 0.37 < 1 - 0.2 with A < 0: PPO's clipped
    # branch wins, so its gradient is 0; CISPO's is -clip(ratio) * A.
    log_prob = (advantage * one).requires_grad_()
    ppo_loss, ppo_metrics = policy_loss(0 * one, log_prob, advantage * one, one, CLIP_LOW, CLIP_HIGH, CLIP_C)
    assert ppo_metrics["actor/pg_clipfrac"] == 1.0
    assert grad_of(ppo_loss, log_prob).item() == 0.0

    loss, metrics = cispo_policy_loss(0 * one, log_prob, advantage * one, one, CLIP_LOW, CLIP_HIGH)
    weight = 1 + CLIP_HIGH if advantage > 0 else 1 - CLIP_LOW
    assert metrics["actor/pg_clipfrac"] == 1.0
    assert grad_of(loss, log_prob).item() == pytest.approx(-weight * advantage)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_cispo_on_policy_is_reinforce(mode):
    # At the first mini-batch log_prob == old_log_prob: the weight is 1 and the loss is -agg(A * log_prob).
    _, lp, adv, mask = batch(3)
    lp = lp.requires_grad_()
    loss, metrics = cispo_policy_loss(lp.detach(), lp, adv, mask, CLIP_LOW, CLIP_HIGH, agg=mode)
    leaf, lp64 = leaf64(lp)
    reinforce = ref_agg(per_token(lambda lp_t, a: -a * lp_t, lp64, rows(adv)), rows(mask), mode)
    assert_close(loss, reinforce.item())
    assert_close(grad_of(loss, lp), grad_of(reinforce, leaf))
    assert metrics["actor/pg_clipfrac"] == 0.0 and metrics["actor/ppo_kl"] == 0.0
