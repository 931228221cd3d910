"""PolicyWorker.update with truncated importance sampling against the rollout's kept log-probs."""

import pytest
import torch

from .helpers import actor_settings, generate_settings, log_prob_settings, make_items, update_settings
from rlgraph.workers.policy import PolicyWorker
from tests.tolerances import FP32_AFTER_UPDATE

PROMPTS = ["12+34=", "5+6=", "7=", "99+1="]


@pytest.fixture
def batch(tiny_model_dir, tokenizer):
    """A rollout that kept its log-probs, the actor's recomputed old_log_prob and advantages."""
    worker = PolicyWorker(tiny_model_dir, actor_settings(lr=1e-2), seed=0)
    rollout = worker.generate(make_items(PROMPTS, tokenizer),
                              settings=generate_settings(n=2, max_new_tokens=5, keep_log_probs=True), seed=3)
    old = worker.log_prob(rollout, settings=log_prob_settings())
    advantages = torch.randn(len(rollout), 1, generator=torch.Generator().manual_seed(0)).expand_as(old)
    return rollout, old, advantages * rollout.response_mask


def updated(tiny_model_dir, rollout, old, advantages, **settings):
    """The weights and metrics after one update of a fresh actor (two epochs of mini-batches of 4)."""
    worker = PolicyWorker(tiny_model_dir, actor_settings(lr=1e-2), seed=0)
    settings = {"epochs": 2, "mini_batch_size": 4, "micro_batch": 2} | settings
    metrics = worker.update(rollout, old, advantages, settings=update_settings(**settings), shuffle_seed=5)
    return worker.module.state_dict(), metrics


def assert_same_weights(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


def test_tis_off_never_reads_the_rollout_log_probs(tiny_model_dir, batch):
    rollout, old, advantages = batch
    weights, metrics = updated(tiny_model_dir, rollout, old, advantages)
    rollout.sample_log_probs = torch.full_like(old, float("nan"))
    weights_nan, metrics_nan = updated(tiny_model_dir, rollout, old, advantages)
    rollout.sample_log_probs = None
    weights_none, _ = updated(tiny_model_dir, rollout, old, advantages)
    assert_same_weights(weights, weights_nan)
    assert_same_weights(weights, weights_none)
    assert metrics == metrics_nan and not any(name.startswith("mismatch/") for name in metrics)


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_tis_on_matching_log_probs_is_the_plain_update(tiny_model_dir, batch, level):
    rollout, old, advantages = batch
    plain, plain_metrics = updated(tiny_model_dir, rollout, old, advantages)
    rollout.sample_log_probs = old.clone()  # the rollout samples exactly what the trainer computes: w = 1
    weights, metrics = updated(tiny_model_dir, rollout, old, advantages, tis=level)
    assert_same_weights(plain, weights)
    assert metrics["actor/pg_loss"] == plain_metrics["actor/pg_loss"]
    assert metrics["mismatch/rollout_is_mean"] == metrics["mismatch/rollout_is_max"] == 1.0
    assert metrics["mismatch/rollout_is_ratio_fraction_high"] == 0.0
    assert metrics["mismatch/mismatch_kl"] == 0.0 and metrics["training/rollout_probs_diff_max"] == 0.0


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_tis_weights_follow_their_rows_into_micro_batches(tiny_model_dir, batch, level):
    rollout, old, advantages = batch
    noise = 0.5 * torch.randn(old.shape, generator=torch.Generator().manual_seed(1))
    rollout.sample_log_probs = (old + noise) * rollout.response_mask  # a rollout that disagrees with the trainer
    plain, _ = updated(tiny_model_dir, rollout, old, advantages)
    # seq-mean-token-mean weighs rows equally, so one pass over the whole batch is the sum of its micro-batches
    whole, metrics = updated(tiny_model_dir, rollout, old, advantages, tis=level, epochs=1, mini_batch_size=8,
                             micro_batch=8, loss_agg="seq-mean-token-mean")
    micro, _ = updated(tiny_model_dir, rollout, old, advantages, tis=level, epochs=1, mini_batch_size=8,
                       micro_batch=2, loss_agg="seq-mean-token-mean")
    for name in whole:
        torch.testing.assert_close(whole[name], micro[name], **FP32_AFTER_UPDATE)
    assert any(not torch.equal(plain[name], whole[name]) for name in plain)  # and the weights did change it
    assert metrics["mismatch/rollout_is_max"] > 2.0 and metrics["mismatch/rollout_is_ratio_fraction_high"] > 0
    assert metrics["mismatch/mismatch_kl"] != 0.0


def test_tis_without_kept_log_probs_is_a_clear_error(tiny_model_dir, batch):
    rollout, old, advantages = batch
    rollout.sample_log_probs = None
    with pytest.raises(ValueError, match="tis = token needs the rollout's sampling log-probs"):
        updated(tiny_model_dir, rollout, old, advantages, tis="token")
