import math
import random

import pytest
import torch

from rlgraph.algos import (
    distill_advantage,
    gae,
    grpo_advantage,
    reinforce_pp_advantage,
    reinforce_pp_baseline_advantage,
    remax_advantage,
    rloo_advantage,
)

from .helpers import (
    SEEDS,
    as_index,
    assert_close,
    fill_masked,
    group_labels,
    lengths_for,
    prefix_mask,
    randn,
    ref_whiten,
    rows,
    scattered_mask,
)

BATCH, RESPONSE_LEN = 14, 9


def batch(seed: int, scattered: bool = False, min_group: int = 1):
    rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    if scattered:
        mask = scattered_mask(rng, BATCH, RESPONSE_LEN)
    else:
        mask = prefix_mask(lengths_for(rng, BATCH, RESPONSE_LEN), RESPONSE_LEN)
    rewards = randn(gen, BATCH, RESPONSE_LEN)
    values = randn(gen, BATCH, RESPONSE_LEN)
    return rewards, values, mask, group_labels(rng, BATCH, min_group)


# --- float64 references, one row and one token at a time ---


def ref_gae(r, v, m, gamma, lam):
    advantages = []
    for r_row, v_row, m_row in zip(r, v, m):
        row = [0.0] * len(r_row)
        next_value, last = 0.0, 0.0
        for t in reversed(range(len(r_row))):
            if m_row[t]:  # a masked token is skipped: value and running advantage carry over it
                delta = r_row[t] + gamma * next_value - v_row[t]
                last = delta + gamma * lam * last
                next_value = v_row[t]
            row[t] = last
        advantages.append(row)
    returns = [[a + value for a, value in zip(a_row, v_row)] for a_row, v_row in zip(advantages, v)]
    return ref_whiten(advantages, m), returns


def ref_scores(r, m):
    return [sum(x for x, keep in zip(r_row, m_row) if keep) for r_row, m_row in zip(r, m)]


def ref_groups(labels):
    members = {}
    for i, label in enumerate(labels):
        members.setdefault(label, []).append(i)
    return members


def ref_spread(per_row, m):
    return [[value if keep else 0.0 for keep in m_row] for value, m_row in zip(per_row, m)]


def ref_grpo(r, m, labels, eps, norm_by_std):
    scores = ref_scores(r, m)
    out = [0.0] * len(scores)
    for members in ref_groups(labels).values():
        group = [scores[i] for i in members]
        n = len(group)
        mean = sum(group) / n if n > 1 else 0.0
        std = math.sqrt(sum((s - mean) ** 2 for s in group) / (n - 1)) if n > 1 else 1.0
        for i in members:
            out[i] = (scores[i] - mean) / (std + eps) if norm_by_std else scores[i] - mean
    return ref_spread(out, m)


def ref_rloo(r, m, labels):
    scores = ref_scores(r, m)
    out = list(scores)
    for members in ref_groups(labels).values():
        if len(members) > 1:
            for i in members:
                others = [scores[j] for j in members if j != i]
                out[i] = scores[i] - sum(others) / len(others)
    return ref_spread(out, m)


def ref_reinforce_pp(r, m, gamma):
    returns = []
    for r_row, m_row in zip(r, m):
        row, running = [0.0] * len(r_row), 0.0
        for t in reversed(range(len(r_row))):
            running = r_row[t] + gamma * running
            row[t] = running
            if not m_row[t]:
                running = 0.0
        returns.append(row)
    whitened = ref_whiten(returns, m)
    advantages = [[a if keep else 0.0 for a, keep in zip(a_row, m_row)] for a_row, m_row in zip(whitened, m)]
    return advantages, returns


def ref_reinforce_pp_baseline(r, m, labels):
    scores = ref_scores(r, m)
    out = list(scores)
    for members in ref_groups(labels).values():
        if len(members) > 1:
            mean = sum(scores[i] for i in members) / len(members)
            for i in members:
                out[i] = scores[i] - mean
    whitened = ref_whiten(ref_spread(out, m), m)
    return [[a if keep else 0.0 for a, keep in zip(a_row, m_row)] for a_row, m_row in zip(whitened, m)]


def ref_reward_to_go(r, m):
    out = []
    for r_row, m_row in zip(r, m):
        out.append([sum(r_row[k] for k in range(t, len(r_row)) if m_row[k]) for t in range(len(r_row))])
    return out


def ref_remax(r, baselines, m):
    returns = ref_reward_to_go(r, m)
    advantages = [
        [g - (b if keep else 0.0) for g, keep in zip(g_row, m_row)] for g_row, b, m_row in zip(returns, baselines, m)
    ]
    return advantages, returns


# --- agreement with the references ---


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("scattered", [False, True])
@pytest.mark.parametrize("gamma, lam", [(1.0, 0.95), (0.99, 0.9)])
def test_gae_matches_reference(seed, scattered, gamma, lam):
    rewards, values, mask, _ = batch(seed, scattered)
    advantages, returns = gae(rewards, values, mask, gamma, lam)
    ref_adv, ref_returns = ref_gae(rows(rewards), rows(values), rows(mask), gamma, lam)
    assert_close(advantages, ref_adv)
    assert_close(returns, ref_returns)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("scattered", [False, True])
def test_gae_undiscounted_with_zero_values_is_reward_to_go(seed, scattered):
    rewards, values, mask, _ = batch(seed, scattered)
    _, returns = gae(rewards, torch.zeros_like(values), mask, gamma=1.0, lam=1.0)
    assert_close(returns, ref_reward_to_go(rows(rewards), rows(mask)))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("norm_by_std", [True, False])
def test_grpo_matches_reference(seed, norm_by_std):
    rewards, _, mask, labels = batch(seed)
    advantages, returns = grpo_advantage(rewards, mask, labels, norm_by_std=norm_by_std)
    assert_close(advantages, ref_grpo(rows(rewards), rows(mask), labels, 1e-6, norm_by_std))
    assert returns is advantages or torch.equal(returns, advantages)


@pytest.mark.parametrize("index_kind", ["str", "int", "numpy", "tensor"])
def test_group_index_may_be_any_sequence(index_kind):
    rewards, _, mask, labels = batch(7)
    index = as_index(labels, index_kind)
    for estimator in (grpo_advantage, rloo_advantage, reinforce_pp_baseline_advantage):
        torch.testing.assert_close(estimator(rewards, mask, index)[0], estimator(rewards, mask, labels)[0])


def test_group_index_length_is_checked():
    rewards, _, mask, labels = batch(0)
    with pytest.raises(ValueError, match="index has"):
        grpo_advantage(rewards, mask, labels[:-1])


@pytest.mark.parametrize("seed", SEEDS)
def test_rloo_matches_reference(seed):
    rewards, _, mask, labels = batch(seed)
    advantages, returns = rloo_advantage(rewards, mask, labels)
    assert_close(advantages, ref_rloo(rows(rewards), rows(mask), labels))
    assert torch.equal(returns, advantages)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("scattered", [False, True])
@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_reinforce_pp_matches_reference(seed, scattered, gamma):
    rewards, _, mask, _ = batch(seed, scattered)
    advantages, returns = reinforce_pp_advantage(rewards, mask, gamma)
    ref_adv, ref_returns = ref_reinforce_pp(rows(rewards), rows(mask), gamma)
    assert_close(advantages, ref_adv)
    assert_close(returns, ref_returns)


@pytest.mark.parametrize("seed", SEEDS)
def test_reinforce_pp_baseline_matches_reference(seed):
    rewards, _, mask, labels = batch(seed)
    advantages, returns = reinforce_pp_baseline_advantage(rewards, mask, labels)
    assert_close(advantages, ref_reinforce_pp_baseline(rows(rewards), rows(mask), labels))
    assert torch.equal(returns, advantages)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("scattered", [False, True])
def test_remax_matches_reference(seed, scattered):
    rewards, _, mask, _ = batch(seed, scattered)
    baselines = torch.randn(BATCH, generator=torch.Generator().manual_seed(seed + 100))
    advantages, returns = remax_advantage(rewards, baselines, mask)
    ref_adv, ref_returns = ref_remax(rows(rewards), baselines.double().tolist(), rows(mask))
    assert_close(advantages, ref_adv)
    assert_close(returns, ref_returns)


# --- properties ---

GROUP_ESTIMATORS = {
    "grpo": lambda r, m, i: grpo_advantage(r, m, i)[0],
    "dr_grpo": lambda r, m, i: grpo_advantage(r, m, i, norm_by_std=False)[0],
    "rloo": lambda r, m, i: rloo_advantage(r, m, i)[0],
    "reinforce_pp_baseline": lambda r, m, i: reinforce_pp_baseline_advantage(r, m, i)[0],
}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", GROUP_ESTIMATORS)
def test_group_advantages_ignore_a_per_group_shift(seed, name):
    # Quarter-integer rewards and shifts keep every score exact in float32, so that groups whose
    # answers all score alike (std 0) stay exactly tied after the shift.
    rewards, _, mask, labels = batch(seed, min_group=2)
    rewards = torch.round(rewards * 4) / 4
    shifts = {label: 0.25 * random.Random(f"{seed}{label}").randint(-12, 12) for label in labels}
    shifted = rewards.clone()
    for i, label in enumerate(labels):
        last = int(mask[i].nonzero().max())  # an outcome reward sits on the last response token
        shifted[i, last] += shifts[label]
    estimator = GROUP_ESTIMATORS[name]
    assert_close(estimator(shifted, mask, labels), estimator(rewards, mask, labels).double())


ALL_ESTIMATORS = {
    "gae": lambda r, v, m, i: gae(r, v, m, 0.99, 0.95),
    "grpo": lambda r, v, m, i: grpo_advantage(r, m, i),
    "dr_grpo": lambda r, v, m, i: grpo_advantage(r, m, i, norm_by_std=False),
    "rloo": lambda r, v, m, i: rloo_advantage(r, m, i),
    "reinforce_pp": lambda r, v, m, i: reinforce_pp_advantage(r, m, 0.99),
    "reinforce_pp_baseline": lambda r, v, m, i: reinforce_pp_baseline_advantage(r, m, i),
    "remax": lambda r, v, m, i: remax_advantage(r, torch.linspace(-1.0, 1.0, r.shape[0]), m),
}


@pytest.mark.parametrize("name", ALL_ESTIMATORS)
@pytest.mark.parametrize("fill", [float("nan"), 1e30])
@pytest.mark.parametrize("scattered", [False, True])
def test_masked_positions_do_not_leak(name, fill, scattered):
    rewards, values, mask, labels = batch(11, scattered)
    estimator = ALL_ESTIMATORS[name]
    clean = estimator(rewards, values, mask, labels)
    dirty = estimator(fill_masked(rewards, mask, fill), fill_masked(values, mask, fill), mask, labels)
    for got, want in zip(dirty, clean):
        assert_close(got, want.double(), mask)


@pytest.mark.parametrize("name", ALL_ESTIMATORS)
def test_estimators_do_not_track_gradients(name):
    rewards, values, mask, labels = batch(1)
    outputs = ALL_ESTIMATORS[name](rewards.requires_grad_(), values.requires_grad_(), mask, labels)
    assert not any(out.requires_grad for out in outputs)


# --- on-policy distillation ---


def ref_distill(student, teacher, m, coef, gamma):
    advantages = []
    for s_row, t_row, m_row in zip(student, teacher, m):
        row, running = [0.0] * len(s_row), 0.0
        for t in reversed(range(len(s_row))):
            if m_row[t]:  # a masked token is skipped: the running sum carries over it
                running = coef * (t_row[t] - s_row[t]) + gamma * running
                row[t] = running
        advantages.append(row)
    return advantages


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("gamma", [0.0, 0.9])
@pytest.mark.parametrize("scattered", [False, True])
def test_distill_advantage_is_the_teachers_log_prob_minus_the_students(seed, gamma, scattered):
    _, _, mask, _ = batch(seed, scattered)
    gen = torch.Generator().manual_seed(seed + 1)
    student, teacher = -torch.rand(BATCH, RESPONSE_LEN, generator=gen) * 5, -torch.rand(BATCH, RESPONSE_LEN, generator=gen) * 5
    advantages, returns = distill_advantage(student, teacher, mask, coef=0.5, gamma=gamma)
    assert_close(advantages, ref_distill(rows(student), rows(teacher), rows(mask), 0.5, gamma))
    assert torch.equal(returns, advantages)
    assert not advantages[~mask.bool()].any()


def test_a_student_equal_to_its_teacher_gets_no_advantage():
    _, _, mask, _ = batch(0)
    log_prob = -torch.rand(BATCH, RESPONSE_LEN, generator=torch.Generator().manual_seed(3))
    assert not distill_advantage(log_prob, log_prob.clone(), mask)[0].any()
