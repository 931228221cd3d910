import io

import pytest
import torch

from .helpers import actor_settings, generate_settings, log_prob_settings, make_items, ref_settings, update_settings
from rlgraph.workers.batch import Rollout
from rlgraph.workers.policy import PolicyWorker
from tests.tolerances import FP32_AFTER_UPDATE

PROMPTS = ["12+34=", "5+6=", "7=", "99+1="]


@pytest.fixture
def actor(tiny_model_dir):
    return PolicyWorker(tiny_model_dir, actor_settings(lr=1e-2), seed=0)


@pytest.fixture
def rollout(actor, tokenizer) -> Rollout:
    return actor.generate(make_items(PROMPTS, tokenizer), settings=generate_settings(n=2, max_new_tokens=5), seed=0)


def unpadded_log_prob(module, rollout: Rollout, row: int, temperature: float = 1.0) -> torch.Tensor:
    """Reference: the row's real tokens alone (no padding, default positions), one full forward."""
    keep = rollout.attention_mask[row].bool()
    tokens = rollout.input_ids[row][keep].unsqueeze(0)
    logits = module(input_ids=tokens).logits[0].float() / temperature
    log_probs = torch.log_softmax(logits[:-1], dim=-1).gather(-1, tokens[0, 1:, None]).squeeze(-1)
    length = int(rollout.response_mask[row].sum())
    return log_probs[-length:] if length < rollout.response_length else log_probs[-rollout.response_length :]


def test_log_prob_matches_unpadded_forward(actor, rollout):
    # prompts have different lengths, so rows are left-padded: the log-probs must not notice
    assert (rollout.attention_mask[:, : rollout.prompt_length] == 0).any()
    log_prob, entropy = actor.log_prob(rollout, settings=log_prob_settings(micro_batch=3, temperature=0.8),
                                       with_entropy=True)
    assert log_prob.shape == entropy.shape == rollout.responses.shape and log_prob.dtype == torch.float32
    with torch.no_grad():
        for row in range(len(rollout)):
            length = int(rollout.response_mask[row].sum())
            expected = unpadded_log_prob(actor.module, rollout, row, temperature=0.8)
            torch.testing.assert_close(log_prob[row, :length], expected, atol=1e-5, rtol=1e-5)


def test_log_prob_of_a_row_does_not_depend_on_its_batch(actor, rollout):
    full = actor.log_prob(rollout, settings=log_prob_settings())
    for row in (0, 4):  # the longest prompt and a padded one
        alone = actor.log_prob(Rollout.concat([rollout.select([row])]), settings=log_prob_settings())
        mask = rollout.response_mask[row].bool()
        torch.testing.assert_close(alone[0][mask], full[row][mask], atol=1e-5, rtol=1e-5)


def test_zero_advantage_update_leaves_weights_unchanged(actor, rollout):
    before = actor.state_dict()
    old = actor.log_prob(rollout, settings=log_prob_settings())
    metrics = actor.update(rollout, old, torch.zeros_like(old),
                           settings=update_settings(epochs=2, mini_batch_size=4, micro_batch=2))
    assert metrics["actor/grad_norm"] == pytest.approx(0.0, abs=1e-8)
    for name, value in actor.state_dict().items():
        torch.testing.assert_close(value, before[name], atol=1e-7, rtol=0)
    assert set(metrics) == {
        "actor/pg_loss",
        "actor/pg_clipfrac",
        "actor/pg_clipfrac_lower",
        "actor/ppo_kl",
        "actor/entropy",
        "actor/grad_norm",
        "actor/lr",
        "actor/skipped_update_frac",
    }


def test_positive_advantage_raises_log_prob(actor, rollout):
    old = actor.log_prob(rollout, settings=log_prob_settings())
    target = 1  # push up one sampled response, push the others down a little
    advantages = torch.full_like(old, -0.1)
    advantages[target] = 1.0
    advantages = advantages * rollout.response_mask
    for _ in range(3):
        actor.update(rollout, old, advantages, settings=update_settings(mini_batch_size=8))
    new = actor.log_prob(rollout, settings=log_prob_settings())
    mask = rollout.response_mask[target].bool()
    assert new[target][mask].sum() > old[target][mask].sum() + 0.1


def test_micro_batches_accumulate_to_the_mini_batch_gradient(tiny_model_dir, tokenizer):
    # seq-mean-token-mean weighs rows equally, so micro-batch shares reproduce the full-batch loss exactly
    workers = [PolicyWorker(tiny_model_dir, actor_settings(lr=1e-3), seed=0) for _ in range(2)]
    rollout = workers[0].generate(make_items(PROMPTS, tokenizer), settings=generate_settings(n=2, max_new_tokens=5),
                                  seed=1)
    old = workers[0].log_prob(rollout, settings=log_prob_settings())
    advantages = torch.randn(len(rollout), 1, generator=torch.Generator().manual_seed(0)).expand_as(old)
    agg = "seq-mean-token-mean"
    m_full = workers[0].update(rollout, old, advantages, shuffle=False,
                               settings=update_settings(loss_agg=agg, mini_batch_size=8, micro_batch=8))
    m_micro = workers[1].update(rollout, old, advantages, shuffle=False,
                                settings=update_settings(loss_agg=agg, mini_batch_size=8, micro_batch=2))
    assert m_full["actor/grad_norm"] == pytest.approx(m_micro["actor/grad_norm"], rel=1e-4)
    after = [w.state_dict() for w in workers]
    for name in after[0]:
        torch.testing.assert_close(after[0][name], after[1][name], **FP32_AFTER_UPDATE)


def test_kl_loss_and_entropy_bonus(actor, rollout, tiny_model_dir):
    ref = PolicyWorker(tiny_model_dir, ref_settings(), seed=0)
    assert not any(p.requires_grad for p in ref.module.parameters())
    with pytest.raises(RuntimeError, match="RefSettings"):
        ref.update(rollout, ref.log_prob(rollout, settings=log_prob_settings()), torch.zeros(len(rollout), 5),
                   settings=update_settings())
    settings = update_settings(kl_coef=0.1, entropy_coeff=0.01)
    old = actor.log_prob(rollout, settings=log_prob_settings())
    ref_log_prob = ref.log_prob(rollout, settings=log_prob_settings())
    metrics = actor.update(rollout, old, torch.zeros_like(old), ref_log_prob, settings=settings)
    assert metrics["actor/kl_loss"] == pytest.approx(0.0, abs=1e-6)  # same weights as the reference
    assert metrics["actor/grad_norm"] > 0  # the entropy bonus alone moves the weights
    metrics = actor.update(rollout, old, torch.zeros_like(old), ref_log_prob, settings=settings)
    assert metrics["actor/kl_loss"] > 0


def test_warmup_schedule_and_lr_metric(tiny_model_dir, tokenizer):
    actor = PolicyWorker(tiny_model_dir, actor_settings(lr=1e-3, warmup_steps=4), seed=0)
    rollout = actor.generate(make_items(PROMPTS[:2], tokenizer), settings=generate_settings(n=2, max_new_tokens=3),
                             seed=0)
    old = actor.log_prob(rollout, settings=log_prob_settings())
    settings = update_settings(epochs=2, mini_batch_size=2)
    lrs = [actor.update(rollout, old, torch.zeros_like(old), settings=settings)["actor/lr"] for _ in range(6)]
    assert lrs == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3])


def test_checkpoint_states_load_with_weights_only(actor, rollout, tiny_model_dir, tmp_path):
    old = actor.log_prob(rollout, settings=log_prob_settings())
    advantages = torch.ones_like(old) * rollout.response_mask
    settings = update_settings(mini_batch_size=4)
    actor.update(rollout, old, advantages, settings=settings)
    buffer = io.BytesIO()
    torch.save({"model": actor.state_dict(), "optim": actor.optimizer_state()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)

    actor.save(tmp_path / "hf")
    restored = PolicyWorker(str(tmp_path / "hf"), actor_settings(lr=1e-2), seed=0)
    torch.testing.assert_close(restored.log_prob(rollout, settings=log_prob_settings()),
                               actor.log_prob(rollout, settings=log_prob_settings()))
    fresh = PolicyWorker(tiny_model_dir, actor_settings(lr=1e-2), seed=0)
    fresh.load_state_dict(saved["model"])
    fresh.load_optimizer_state(saved["optim"])
    # identical state: the next update gives identical weights
    actor.update(rollout, old, advantages, settings=settings, shuffle=False)
    fresh.update(rollout, old, advantages, settings=settings, shuffle=False)
    torch.testing.assert_close(fresh.log_prob(rollout, settings=log_prob_settings()),
                               actor.log_prob(rollout, settings=log_prob_settings()))
    assert fresh.optim.lr == actor.optim.lr


def test_generate_reads_the_trained_weights_in_place(actor, tokenizer):
    items = make_items(PROMPTS, tokenizer)
    greedy = generate_settings(n=1, max_new_tokens=4, temperature=0.0)
    before = actor.generate(items, settings=greedy)
    with torch.no_grad():
        actor.module.model.norm.weight.zero_()  # all logits 0: greedy now picks token 0
    after = actor.generate(items, settings=greedy)
    assert not torch.equal(before.responses, after.responses)
    assert (after.responses == 0).all()


def test_greedy_generation_agrees_with_scoring(actor, tokenizer):
    # generate (KV cache, positions from HF) and log_prob (one forward, our positions) see the same model,
    # and settings the model ships in its generation_config do not bend the samples off-policy
    shipped = actor.module.generation_config
    shipped.repetition_penalty, shipped.no_repeat_ngram_size = 50.0, 1
    greedy = generate_settings(n=1, max_new_tokens=5, temperature=0.0)
    rollout = actor.generate(make_items(PROMPTS, tokenizer), settings=greedy)
    assert actor.module.generation_config is shipped
    with torch.no_grad():
        logits = actor.response_logits(rollout)  # (batch, R, vocab)
    mask = rollout.response_mask.bool()
    assert torch.equal(logits.argmax(-1)[mask], rollout.responses[mask])


def test_bad_settings_are_clear_errors(actor, rollout, tiny_model_dir):
    # the loss settings come with each update: a bad one fails the call before the weights move
    before = actor.state_dict()
    old = actor.log_prob(rollout, settings=log_prob_settings())
    advantages = torch.ones_like(old)
    with pytest.raises(ValueError, match="unknown loss_agg 'token_mean'"):
        actor.update(rollout, old, advantages, settings=update_settings(loss_agg="token_mean"))
    with pytest.raises(ValueError, match="unknown kl_kind 'k4'"):
        actor.update(rollout, old, advantages, settings=update_settings(kl_kind="k4"))
    with pytest.raises(KeyError, match="unknown policy loss 'vanila'"):
        actor.update(rollout, old, advantages, settings=update_settings(policy_loss="vanila"))
    for name, value in actor.state_dict().items():
        assert torch.equal(value, before[name]), name
    with pytest.raises(ValueError, match="unknown dtype 'float33'"):
        PolicyWorker(tiny_model_dir, ref_settings(dtype="float33"), seed=0)
    ref = PolicyWorker(tiny_model_dir, ref_settings(dtype="bfloat16"), seed=0)
    assert next(ref.module.parameters()).dtype == torch.bfloat16


def test_bfloat16_log_probs_are_float32_and_close(actor, rollout, tiny_model_dir):
    ref = PolicyWorker(tiny_model_dir, ref_settings(dtype="bfloat16"), seed=0)
    low = ref.log_prob(rollout, settings=log_prob_settings())
    assert low.dtype == torch.float32
    mask = rollout.response_mask.bool()
    torch.testing.assert_close(low[mask], actor.log_prob(rollout, settings=log_prob_settings())[mask],
                               atol=0.1, rtol=0.05)
    with pytest.raises(ValueError, match="temperature > 0"):
        ref.log_prob(rollout, settings=log_prob_settings(temperature=0.0))


@pytest.mark.parametrize("temperature, top_k", [(1.0, 0), (0.7, 3)])
def test_log_probs_kept_from_generation_equal_the_recomputed_ones(actor, tokenizer, temperature, top_k):
    """`generate` with `keep_log_probs` keeps what `log_prob` would recompute: the same samples, and log-probs
    of the untruncated distribution at the temperature (top-k only limits which tokens are drawn)."""
    items = make_items(PROMPTS, tokenizer)
    sampling = {"n": 3, "max_new_tokens": 5, "temperature": temperature, "top_k": top_k}
    kept = actor.generate(items, settings=generate_settings(**sampling, keep_log_probs=True), seed=7)
    plain = actor.generate(items, settings=generate_settings(**sampling), seed=7)
    assert torch.equal(kept.responses, plain.responses) and plain.sample_log_probs is None
    recomputed = actor.log_prob(kept, settings=log_prob_settings(temperature=temperature))
    mask = kept.response_mask.bool()
    torch.testing.assert_close(kept.sample_log_probs[mask], recomputed[mask], rtol=0, atol=1e-4)
    assert (kept.sample_log_probs[~mask] == 0).all()
    # they travel with the rows: split and joined again, as the data-parallel dispatch does
    joined = Rollout.concat(kept.split(2))
    assert torch.equal(joined.sample_log_probs, kept.sample_log_probs)
    # and an update reads them when no old_log_prob is given
    before = {k: v.clone() for k, v in actor.module.state_dict().items()}
    actor.update(kept, None, torch.ones_like(recomputed), settings=update_settings(epochs=1, temperature=temperature),
                 shuffle=False)
    assert any(not torch.equal(before[k], v) for k, v in actor.module.state_dict().items())
