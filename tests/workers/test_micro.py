"""rlgraph/workers/micro.py: token-budget micro-batches cut to their longest row give the padded whole-batch
results (log-probs, values, losses, gradients) on a batch whose lengths vary 4x."""

from __future__ import annotations

import pytest
import torch

from rlgraph.workers import CriticWorker, PolicyWorker
from rlgraph.workers.batch import Rollout
from rlgraph.workers.micro import pack, row_lengths, split_rows, token_budget_micro_batches

from .helpers import (EOS, PAD, actor_settings, critic_settings, critic_update_settings, forward_settings,
                      log_prob_settings, ref_settings, update_settings)
from tests.tolerances import FP32_REORDERED

ROWS = 16
BUDGET = 48  # the longest row is 12 + 12 = 24 tokens: passes of 2 to 8 rows


def mixed_rollout(seed: int = 0) -> Rollout:
    """Prompts of 3..12 tokens (left-padded) and responses of 3..12 tokens ending in EOS (right-padded)."""
    g = torch.Generator().manual_seed(seed)
    prompt_lengths = [3 + (5 * i) % 10 for i in range(ROWS)]  # 3..12, mixed order
    response_lengths = [12 - (7 * i) % 10 for i in range(ROWS)]  # 3..12
    prompt_lengths[0], response_lengths[0] = 12, 12  # one full-length row: the padded batch is 12 + 12 wide
    prompts = torch.full((ROWS, 12), PAD)
    prompt_mask = torch.zeros(ROWS, 12, dtype=torch.long)
    responses = torch.full((ROWS, 12), PAD)
    response_mask = torch.zeros(ROWS, 12, dtype=torch.long)
    for row, (p, r) in enumerate(zip(prompt_lengths, response_lengths)):
        prompts[row, 12 - p:] = torch.randint(3, 15, (p,), generator=g)
        prompt_mask[row, 12 - p:] = 1
        responses[row, :r] = torch.randint(3, 15, (r,), generator=g)
        responses[row, r - 1] = EOS
        response_mask[row, :r] = 1
    lists = {name: [None] * ROWS for name in ("ground_truth", "extra_info")}
    return Rollout.build(prompts, prompt_mask, responses, response_mask, PAD, uid=list(range(ROWS)),
                         data_source=["t"] * ROWS, prompt_text=[""] * ROWS, response_text=[""] * ROWS, **lists)


def float64_policy(path: str, settings) -> PolicyWorker:
    worker = PolicyWorker(path, settings, seed=0)
    worker.module.double()  # the model in float64: the two ways differ by rounding only
    return worker


def tokens_seen(module: torch.nn.Module) -> list[int]:
    """Token positions (rows x columns) of every forward pass of `module`, appended as they run."""
    seen: list[int] = []
    module.get_input_embeddings().register_forward_pre_hook(lambda _, args: seen.append(args[0].numel()))
    return seen


def gradients_at_each_step(worker) -> list[dict[str, torch.Tensor]]:
    """The gradients each optimizer step of `worker` applies (recorded, then the real step)."""
    steps: list[dict[str, torch.Tensor]] = []
    step = worker.optim.clip_and_step
    named = list(worker.module.named_parameters() if hasattr(worker, "module") else
                 [*worker.backbone.named_parameters(), *worker.value_head.named_parameters()])

    def recorded() -> float:
        steps.append({name: p.grad.detach().clone() for name, p in named if p.grad is not None})
        return step()

    worker.optim.clip_and_step = recorded
    return steps


def assert_same_gradients(padded: list[dict], budget: list[dict]) -> None:
    """Equal at float32's tolerance (log-probs and the value head are float32 in both): relative to the
    largest gradient of each tensor."""
    assert len(padded) == len(budget) > 0
    for before, after in zip(padded, budget):
        assert before.keys() == after.keys()
        for name in before:
            scale = float(before[name].abs().max())
            torch.testing.assert_close(after[name], before[name], rtol=1e-5, atol=1e-6 * scale)


# --- forming the micro-batches ---


def test_passes_fit_the_budget_cover_every_row_once_and_run_longest_first():
    rollout = mixed_rollout()
    prompt, response = row_lengths(rollout)
    passes = token_budget_micro_batches(torch.arange(ROWS), prompt, response, BUDGET)
    assert sorted(torch.cat(passes).tolist()) == list(range(ROWS))
    for rows in passes:
        assert len(rows) * int((prompt + response)[rows].max()) <= BUDGET
    totals = [int(prompt[rows[0]] + response[rows[0]]) for rows in passes]
    assert totals == sorted(totals, reverse=True) and len(passes) > 2
    again = token_budget_micro_batches(torch.arange(ROWS), prompt, response, BUDGET)
    assert all(torch.equal(a, b) for a, b in zip(passes, again))


def test_a_row_longer_than_the_budget_is_a_pass_of_its_own():
    prompt, response = torch.tensor([10, 2, 2]), torch.tensor([10, 2, 2])
    passes = token_budget_micro_batches(torch.arange(3), prompt, response, 8)
    assert [p.tolist() for p in passes] == [[0], [1, 2]]


def test_a_pass_is_packed_to_its_longest_row_and_maps_back():
    rollout = mixed_rollout()
    prompt, response = row_lengths(rollout)
    packed, unpack = pack(rollout.select(range(1, ROWS)))  # without row 0, the 12 + 12 one
    longest = int((prompt + response)[1:].max())
    assert packed.input_ids.shape[1] == longest < int(prompt.max() + response.max())
    assert packed.response_length == int(response[1:].max())
    for row in range(1, ROWS):  # every row: the same tokens at the same positions, ending at the last column
        mask, packed_mask = rollout.attention_mask[row].bool(), packed.attention_mask[row - 1].bool()
        assert torch.equal(packed.input_ids[row - 1][packed_mask], rollout.input_ids[row][mask])
        assert torch.equal(packed.position_ids[row - 1][packed_mask], rollout.position_ids[row][mask])
        assert packed_mask[-1]
    assert torch.equal(unpack(packed.loss_mask), rollout.loss_mask[1:])
    assert torch.equal(unpack(packed.responses), torch.where(rollout.loss_mask[1:].bool(), rollout.responses[1:], 0))


# --- equal results ---


def test_log_probs_and_ref_log_probs_equal_the_padded_batch_with_less_computed(tiny_model_dir):
    rollout = mixed_rollout()
    for settings in (actor_settings(), ref_settings()):
        worker = float64_policy(tiny_model_dir, settings)
        seen = tokens_seen(worker.module)
        padded = worker.log_prob(rollout, settings=log_prob_settings(), with_entropy=True)
        padded_tokens = sum(seen)
        seen.clear()
        budget = worker.log_prob(rollout, settings=log_prob_settings(micro_batch_tokens=BUDGET), with_entropy=True)
        mask = rollout.loss_mask.bool()
        for a, b in zip(padded, budget):
            torch.testing.assert_close(b[mask], a[mask], **FP32_REORDERED)
        assert len(seen) > 2 and sum(seen) < 0.75 * padded_tokens and max(seen) <= BUDGET


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_actor_update_gives_the_padded_losses_and_gradients(tiny_model_dir, agg):
    rollout = mixed_rollout()
    padded_actor, budget_actor = (float64_policy(tiny_model_dir, actor_settings(lr=1e-3)) for _ in range(2))
    old = padded_actor.log_prob(rollout, settings=log_prob_settings())
    advantages = torch.randn(ROWS, 12, generator=torch.Generator().manual_seed(1)) * rollout.loss_mask
    ref = old + 0.1 * torch.randn(ROWS, 12, generator=torch.Generator().manual_seed(2))
    common = dict(loss_agg=agg, mini_batch_size=8, kl_coef=0.1, entropy_coeff=0.01)
    grads = [gradients_at_each_step(w) for w in (padded_actor, budget_actor)]
    padded = padded_actor.update(rollout, old, advantages, ref, settings=update_settings(**common), shuffle_seed=3)
    budget = budget_actor.update(rollout, old, advantages, ref, shuffle_seed=3,
                                 settings=update_settings(micro_batch_tokens=BUDGET, **common))
    assert len(grads[0]) == len(grads[1]) == 2  # two mini-batches of 8 samples
    assert_same_gradients(*grads)
    names = ["actor/pg_loss", "actor/kl_loss", "actor/grad_norm"]
    if agg != "seq-mean-token-sum-norm":  # a sum, not a mean: the metric is averaged over the passes
        names += ["actor/entropy", "actor/pg_clipfrac"] if agg == "token-mean" else ["actor/entropy"]
        assert budget["actor/pg_loss"] == pytest.approx(padded["actor/pg_loss"], rel=1e-5, abs=1e-8)
    for name in names[2:]:
        assert budget[name] == pytest.approx(padded[name], rel=1e-5, abs=1e-8), name


def test_critic_values_and_update_equal_the_padded_batch(tiny_model_dir):
    rollout = mixed_rollout()
    critics = [CriticWorker(tiny_model_dir, critic_settings(lr=1e-3), seed=0) for _ in range(2)]
    for critic in critics:
        critic.backbone.double()
        torch.nn.init.normal_(critic.value_head.weight, generator=torch.Generator().manual_seed(0))
    padded_values = critics[0].values(rollout, settings=forward_settings())
    budget_values = critics[1].values(rollout, settings=forward_settings(micro_batch_tokens=BUDGET))
    torch.testing.assert_close(budget_values, padded_values, **FP32_REORDERED)  # 0 off the loss mask in both
    assert padded_values.abs().sum() > 0
    returns = torch.randn(ROWS, 12, generator=torch.Generator().manual_seed(1)) * rollout.loss_mask
    grads = [gradients_at_each_step(c) for c in critics]
    padded = critics[0].update(rollout, padded_values, returns, shuffle_seed=3,
                               settings=critic_update_settings(mini_batch_size=8))
    budget = critics[1].update(rollout, padded_values, returns, shuffle_seed=3,
                               settings=critic_update_settings(mini_batch_size=8, micro_batch_tokens=BUDGET))
    assert_same_gradients(*grads)
    for name in ("critic/vf_loss", "critic/grad_norm", "critic/vpred_mean", "critic/vf_clipfrac"):
        assert budget[name] == pytest.approx(padded[name], rel=1e-5, abs=1e-8), name


def test_sample_count_micro_batches_are_weighted_by_their_tokens(tiny_model_dir):
    # token-mean over micro-batches of 4 samples: each pass weighs by its share of the mini-batch's tokens
    rollout = mixed_rollout()
    actors = [float64_policy(tiny_model_dir, actor_settings(lr=1e-3)) for _ in range(2)]
    old = actors[0].log_prob(rollout, settings=log_prob_settings())
    advantages = torch.randn(ROWS, 12, generator=torch.Generator().manual_seed(1)) * rollout.loss_mask
    grads = [gradients_at_each_step(a) for a in actors]
    actors[0].update(rollout, old, advantages, settings=update_settings(), shuffle=False)
    actors[1].update(rollout, old, advantages, settings=update_settings(micro_batch=4), shuffle=False)
    assert_same_gradients(*grads)


def test_split_rows_by_samples_keeps_the_order():
    rollout = mixed_rollout()
    assert [r.tolist() for r in split_rows(rollout, torch.arange(6), 4, None)] == [[0, 1, 2, 3], [4, 5]]
    assert [r.tolist() for r in split_rows(rollout, torch.arange(6), None, None)] == [list(range(6))]


def test_reward_model_scores_equal_the_padded_batch():
    from rlgraph.workers import RewardModelWorker

    from .helpers import reward_model_settings

    rollout = mixed_rollout()  # token ids 1..14: within the built-in reward model's character vocabulary
    worker = RewardModelWorker("builtin:arith-rm", reward_model_settings(), seed=0)
    worker.module.double()
    padded = worker.score(rollout, settings=forward_settings())
    budget = worker.score(rollout, settings=forward_settings(micro_batch_tokens=BUDGET))
    torch.testing.assert_close(budget, padded, **FP32_REORDERED)
    assert padded.abs().sum() > 0
