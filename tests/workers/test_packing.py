"""rlgraph/workers/packing.py: a role's remove_padding runs each pass on packed rows (no pad tokens, positions
restarting per row) and gives the padded pass's log-probs, entropy, values, scores and gradients, for the
built-in Llama, a tiny Qwen2 and a tiny GPT-2 (absolute positions), with sdpa and eager attention; a model
whose attention would mix the packed rows is refused."""

from __future__ import annotations

import pytest
import torch

from rlgraph.workers import CriticWorker, PolicyWorker, RewardModelWorker
from rlgraph.workers.batch import Rollout
from rlgraph.workers.micro import token_budget_micro_batches
from rlgraph.workers.packing import PackedRows

from .helpers import (EOS, PAD, actor_settings, build_tokenizer, critic_settings, critic_update_settings,
                      forward_settings, log_prob_settings, reward_model_settings, update_settings)
from .test_micro import assert_same_gradients, gradients_at_each_step, tokens_seen

PROMPT, RESPONSE = 12, 16


def uneven_rollout(seed: int = 0) -> Rollout:
    """Rows from 2 to 28 tokens: prompts of 1..12 (left-padded), responses of 1..16 ending in EOS."""
    g = torch.Generator().manual_seed(seed)
    lengths = [(12, 16), (1, 1), (3, 16), (12, 2), (1, 9), (7, 1), (5, 5), (2, 14), (12, 16), (4, 3)]
    rows = len(lengths)
    prompts, responses = torch.full((rows, PROMPT), PAD), torch.full((rows, RESPONSE), PAD)
    prompt_mask = torch.zeros(rows, PROMPT, dtype=torch.long)
    response_mask = torch.zeros(rows, RESPONSE, dtype=torch.long)
    for row, (p, r) in enumerate(lengths):
        prompts[row, PROMPT - p:] = torch.randint(3, 15, (p,), generator=g)
        prompt_mask[row, PROMPT - p:] = 1
        responses[row, :r] = torch.randint(3, 15, (r,), generator=g)
        responses[row, r - 1] = EOS
        response_mask[row, :r] = 1
    lists = {name: [None] * rows for name in ("ground_truth", "extra_info")}
    return Rollout.build(prompts, prompt_mask, responses, response_mask, PAD, uid=list(range(rows)),
                         data_source=["t"] * rows, prompt_text=[""] * rows, response_text=[""] * rows, **lists)


def _save(model, path) -> str:
    model.save_pretrained(path)
    build_tokenizer().save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def model_dirs(tiny_model_dir, tmp_path_factory) -> dict[str, str]:
    """The three position schemes: Llama (rotary), Qwen2 (rotary, q/k/v biases), GPT-2 (learned absolute)."""
    from transformers import GPT2Config, GPT2LMHeadModel, Qwen2Config, Qwen2ForCausalLM

    vocab = len(build_tokenizer())
    torch.manual_seed(1)
    qwen2 = Qwen2ForCausalLM(Qwen2Config(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                         pad_token_id=PAD, eos_token_id=EOS, bos_token_id=None))
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                                      pad_token_id=PAD, eos_token_id=EOS, bos_token_id=EOS))
    return {"llama": tiny_model_dir, "qwen2": _save(qwen2, tmp_path_factory.mktemp("qwen2")),
            "gpt2": _save(gpt2, tmp_path_factory.mktemp("gpt2"))}


def policy(path: str, attn: str, **settings) -> PolicyWorker:
    worker = PolicyWorker(path, actor_settings(**settings), seed=0)
    if attn != "sdpa":
        worker.module.set_attn_implementation(attn)
        worker._check_packing()  # as the worker checks it at start, now for this attention
    return worker


def assert_close_on(mask: torch.Tensor, packed: torch.Tensor, padded: torch.Tensor) -> None:
    """Equal (float32 rounding) on the positions a loss reads; packed passes leave the rest 0."""
    torch.testing.assert_close(packed[mask.bool()], padded[mask.bool()], rtol=1e-5, atol=1e-5)


# --- what a packed pass computes ---


def test_packed_rows_hold_each_rows_tokens_once_with_its_own_positions():
    mask = torch.tensor([[0, 1, 1, 1, 1], [0, 0, 0, 1, 1], [1, 1, 1, 0, 0], [0, 0, 1, 0, 0]])
    ids = torch.arange(20).view(4, 5) + 3
    packed = PackedRows(mask)
    assert packed.shape == (3, 4)  # as wide as the longest row; longest first, first fit: rows of 3 and 1 share
    assert packed.input_ids(ids).tolist() == [[4, 5, 6, 7], [13, 14, 15, 20], [11, 12, 0, 0]]
    # each row's positions from 0; an unused tail is a sequence of its own
    assert packed.position_ids.tolist() == [[0, 1, 2, 3], [0, 1, 2, 0], [0, 1, 0, 1]]
    assert packed.input_ids(ids).flatten()[packed.last_tokens()].tolist() == [7, 12, 15, 20]


def test_a_token_budget_counts_the_packed_rows_a_pass_runs_on():
    """Rows of 10, 5, 5, 5, 5 tokens and a budget of 20: padded, a pass of the 10 holds one more row (2 x 10);
    packed, two rows of 5 share a packed row of width 10, so it holds two (2 packed rows x 10)."""
    rows, prompt, response = torch.arange(5), torch.tensor([5, 3, 3, 3, 3]), torch.tensor([5, 2, 2, 2, 2])
    as_lists = lambda passes: [p.tolist() for p in passes]  # noqa: E731
    assert as_lists(token_budget_micro_batches(rows, prompt, response, 20)) == [[0, 1], [2, 3, 4]]
    assert as_lists(token_budget_micro_batches(rows, prompt, response, 20, packed=True)) == [[0, 1, 2], [3, 4]]
    mask = torch.zeros(3, 10, dtype=torch.long)
    for row, length in enumerate((10, 5, 5)):
        mask[row, 10 - length:] = 1
    assert PackedRows(mask).shape == (2, 10)  # what the budget counted: 20 token positions


@pytest.mark.parametrize("model", ["llama", "qwen2", "gpt2"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_log_probs_and_entropy_equal_the_padded_pass(model_dirs, model, attn):
    rollout = uneven_rollout()
    padded, packed = policy(model_dirs[model], attn), policy(model_dirs[model], attn, remove_padding=True)
    seen = tokens_seen(packed.module)
    log_prob, entropy = padded.log_prob(rollout, settings=log_prob_settings(temperature=0.7), with_entropy=True)
    packed_log_prob, packed_entropy = packed.log_prob(rollout, settings=log_prob_settings(temperature=0.7),
                                                      with_entropy=True)
    assert_close_on(rollout.loss_mask, packed_log_prob, log_prob)
    assert_close_on(rollout.loss_mask, packed_entropy, entropy)
    assert seen[0] < rollout.input_ids.numel() * 0.75  # the pad tokens were not computed


def test_built_in_model_packs_under_a_token_budget_and_micro_batches():
    from rlgraph.models import resolve_model_path

    path = resolve_model_path("builtin:arith-gpt")
    rollout = uneven_rollout()
    padded = PolicyWorker(path, actor_settings(), seed=0).log_prob(rollout, settings=log_prob_settings())
    packed = PolicyWorker(path, actor_settings(remove_padding=True), seed=0)
    seen = tokens_seen(packed.module)
    for settings in (log_prob_settings(micro_batch=3), log_prob_settings(micro_batch_tokens=40)):
        assert_close_on(rollout.loss_mask, packed.log_prob(rollout, settings=settings), padded)
    assert len(seen) > 4 and max(seen[4:]) <= 40  # by the budget (after 4 passes of 3 rows): packed rows <= 40 tokens


def test_update_gives_the_same_gradients_and_parameters(tiny_model_dir):
    rollout = uneven_rollout()
    g = torch.Generator().manual_seed(3)
    old_log_prob = -torch.rand(rollout.responses.shape, generator=g)
    advantages = torch.randn(rollout.responses.shape, generator=g)
    settings = update_settings(micro_batch=5, entropy_coeff=0.01)  # the entropy carries a gradient too
    workers, steps = [], []
    for remove_padding, checkpointing in ((False, False), (True, False), (True, True)):
        worker = PolicyWorker(tiny_model_dir, actor_settings(remove_padding=remove_padding, lr=1e-2,
                                                             gradient_checkpointing=checkpointing), seed=0)
        steps.append(gradients_at_each_step(worker))
        worker.update(rollout, old_log_prob, advantages, settings=settings, shuffle=False)
        workers.append(worker)
    start = PolicyWorker(tiny_model_dir, actor_settings(), seed=0).module.state_dict()
    assert min((p - start[name]).abs().max() for name, p in workers[0].module.named_parameters()) > 1e-3
    for other in range(1, 3):
        assert_same_gradients(steps[0], steps[other])
        # AdamW's first step moves each weight by ~lr whatever its gradient's size: equal to a thousandth of it
        for (name, p), q in zip(workers[0].module.named_parameters(), workers[other].module.parameters()):
            torch.testing.assert_close(q, p, rtol=0, atol=1e-5, msg=lambda m: f"{name}: {m}")


def test_critic_values_and_update_equal_the_padded_ones(tiny_model_dir):
    rollout = uneven_rollout()
    returns = torch.randn(rollout.responses.shape, generator=torch.Generator().manual_seed(4))
    values, steps, critics = [], [], []
    for remove_padding in (False, True):
        critic = CriticWorker(tiny_model_dir, critic_settings(remove_padding=remove_padding), seed=0)
        torch.nn.init.normal_(critic.value_head.weight, generator=torch.Generator().manual_seed(5))
        values.append(critic.values(rollout, settings=forward_settings(micro_batch=4)))
        steps.append(gradients_at_each_step(critic))
        critic.update(rollout, values[-1], returns, settings=critic_update_settings(micro_batch=5), shuffle=False)
        critics.append(critic)
    assert_close_on(rollout.loss_mask, values[1], values[0])
    assert_same_gradients(steps[0], steps[1])


def test_reward_model_scores_equal_the_padded_ones():
    rollout = uneven_rollout()
    scores = [RewardModelWorker("builtin:arith-rm", reward_model_settings(remove_padding=flag), seed=0)
              .score(rollout, settings=forward_settings(micro_batch=4)) for flag in (False, True)]
    assert scores[0].abs().sum() > 0
    torch.testing.assert_close(scores[1], scores[0], rtol=1e-5, atol=1e-5)


# --- rows must not see each other ---


def test_a_pass_whose_rows_attended_to_each_other_would_not_pass(tiny_model_dir):
    """An attention mask of ones turns transformers' packed-sequence detection off: the packed rows then
    attend across their bounds. The log-probs move, and the check refuses such a model."""
    rollout = uneven_rollout()
    padded = policy(tiny_model_dir, "sdpa").log_prob(rollout, settings=log_prob_settings())
    worker = policy(tiny_model_dir, "sdpa", remove_padding=True)
    module = worker.module
    forward = module.forward
    module.forward = lambda **kw: forward(attention_mask=torch.ones_like(kw["input_ids"]), **kw)
    leaked = worker.log_prob(rollout, settings=log_prob_settings())
    assert (leaked - padded)[rollout.loss_mask.bool()].abs().max() > 1e-2
    with pytest.raises(ValueError, match="does not keep packed sequences apart"):
        worker._check_packing()


def test_a_recurrent_model_is_refused(tmp_path):
    """Mamba carries its state from one packed sequence into the next: remove_padding must refuse it."""
    from transformers import MambaConfig, MambaForCausalLM

    torch.manual_seed(0)
    model = MambaForCausalLM(MambaConfig(vocab_size=16, hidden_size=16, state_size=4, num_hidden_layers=1,
                                         pad_token_id=PAD, eos_token_id=EOS, bos_token_id=EOS))
    with pytest.raises(ValueError, match="MambaForCausalLM.* does not keep packed sequences apart"):
        PolicyWorker(_save(model, tmp_path), actor_settings(remove_padding=True), seed=0)



def test_lora_actor_packs_with_its_adapters_on_and_off(tiny_model_dir):
    """Adapters on (the actor) and off (its ref, the base policy), packed as padded."""
    from rlgraph.contract.settings import LoraSettings
    from rlgraph.workers.policy import BasePolicy

    rollout = uneven_rollout()
    lora = LoraSettings(rank=4, alpha=8.0, dropout=0.0, target_modules="all-linear")
    actors = [PolicyWorker(tiny_model_dir, actor_settings(lora=lora, remove_padding=flag, lr=1e-2), seed=0)
              for flag in (False, True)]
    g = torch.Generator().manual_seed(6)
    advantages = torch.randn(rollout.responses.shape, generator=g)
    steps = [gradients_at_each_step(actor) for actor in actors]
    for actor in actors:
        actor.update(rollout, -torch.ones(rollout.responses.shape), advantages, settings=update_settings(),
                     shuffle=False)
    assert_same_gradients(steps[0], steps[1])
    for scorer in (lambda a: a, BasePolicy):
        padded, packed = (scorer(actor).log_prob(rollout, settings=log_prob_settings()) for actor in actors)
        assert_close_on(rollout.loss_mask, packed, padded)
