"""A hand-built multi-turn rollout (model turn, tokens an environment inserted, model turn) through the
policy and the critic: inserted tokens are attended to, never trained on."""

import pytest
import torch

from .helpers import (EOS, PAD, actor_settings, critic_settings, forward_settings, log_prob_settings, make_items,
                      ref_settings, update_settings)
from rlgraph.workers.batch import Rollout, TokenSource
from rlgraph.workers.critic import CriticWorker
from rlgraph.workers.policy import PolicyWorker

M, E = TokenSource.MODEL, TokenSource.ENV
REF = ref_settings()
ACTOR = actor_settings(lr=1e-2, entropy_coeff=0.01)
LOG_PROB = log_prob_settings()
# the entropy bonus and the KL loss on too: every term of the loss must skip the inserted tokens
UPDATE = update_settings(kl_coef=0.1, kl_kind="low_var_kl", entropy_coeff=0.01)
# (prompt, turns): a model turn, a tool's answer, a model turn; a single turn; a two-turn one
CONVERSATIONS = [
    ("12+34=", [(M, "4"), (E, "=46"), (M, "46"), (M, EOS)]),
    ("5+6=", [(M, "11"), (M, EOS)]),
    ("7=", [(M, "7+"), (E, "0="), (M, "7"), (M, EOS)]),
]


def conversation_rollout(tokenizer) -> Rollout:
    items = make_items([prompt for prompt, _ in CONVERSATIONS], tokenizer)
    rows = []
    for _, turns in CONVERSATIONS:
        ids = [[t] if isinstance(t, int) else tokenizer(t)["input_ids"] for _, t in turns]
        rows.append(([i for part in ids for i in part], [s for (s, _), part in zip(turns, ids) for _ in part]))
    width = max(len(ids) for ids, _ in rows)
    responses = torch.full((len(rows), width), PAD)
    source = torch.zeros((len(rows), width), dtype=torch.int8)
    for r, (ids, sources) in enumerate(rows):
        responses[r, : len(ids)], source[r, : len(ids)] = torch.tensor(ids), torch.tensor(sources)
    prompt_width = max(len(item["input_ids"]) for item in items)
    prompts = torch.full((len(items), prompt_width), PAD)
    prompt_mask = torch.zeros_like(prompts)
    for r, item in enumerate(items):
        prompts[r, prompt_width - len(item["input_ids"]) :] = torch.tensor(item["input_ids"])
        prompt_mask[r, prompt_width - len(item["input_ids"]) :] = 1
    lists = {key: [item[key] for item in items] for key in ("data_source", "ground_truth", "extra_info", "prompt_text")}
    return Rollout.build(prompts, prompt_mask, responses, None, PAD, token_source=source, uid=[0, 1, 2],
                         response_text=[""] * len(items), **lists)


@pytest.fixture
def rollout(tokenizer) -> Rollout:
    return conversation_rollout(tokenizer)


def test_log_prob_reads_the_inserted_tokens(tiny_model_dir, rollout):
    """The second model turn is scored after the tool's answer: the same numbers as one forward pass over
    the row's real tokens, inserted ones included."""
    policy = PolicyWorker(tiny_model_dir, REF, seed=0)
    log_prob = policy.log_prob(rollout, settings=LOG_PROB)  # (3, R)
    with torch.no_grad():
        for row in range(len(rollout)):
            tokens = rollout.input_ids[row][rollout.attention_mask[row].bool()][None]
            logits = policy.module(input_ids=tokens).logits[0, :-1].float()
            expected = torch.log_softmax(logits, -1).gather(-1, tokens[0, 1:, None]).squeeze(-1)
            mask = rollout.loss_mask[row].bool()
            real = rollout.attention_mask[row, rollout.prompt_length :].bool()
            expected = expected[-int(real.sum()) :][mask[real]]  # the response's real tokens, then its loss tokens
            torch.testing.assert_close(log_prob[row][mask], expected, atol=1e-5, rtol=1e-5)


def test_update_trains_only_the_loss_mask_tokens(tiny_model_dir, rollout):
    """Whatever sits at the inserted tokens (the logits there, old and ref log-probs, advantages), the loss,
    every metric and the weights after the update are exactly the same."""
    ref = PolicyWorker(tiny_model_dir, REF, seed=0)
    ref_log_prob = ref.log_prob(rollout, settings=LOG_PROB)
    old = ref.log_prob(rollout, settings=LOG_PROB)
    advantages = torch.randn(old.shape, generator=torch.Generator().manual_seed(0))
    elsewhere = rollout.token_source != TokenSource.MODEL  # inserted tokens and padding
    assert (rollout.token_source[elsewhere] == TokenSource.ENV).sum() == 5
    noise = torch.randn(old.shape + (ref.module.config.vocab_size,), generator=torch.Generator().manual_seed(1))

    def train(disturb: bool) -> tuple[dict, dict]:
        actor = PolicyWorker(tiny_model_dir, ACTOR, seed=0)
        args = [old, advantages, ref_log_prob]
        if disturb:
            args = [torch.where(elsewhere, 7.0, a) for a in args]
            exact = actor.response_logits
            # the logits that predict the inserted tokens move a lot; the rest stays exactly as it was
            actor.response_logits = lambda part: (
                exact(part) + 5 * noise[: len(part)] * (part.token_source != M)[..., None])
        metrics = actor.update(rollout, *args, settings=UPDATE, shuffle=False)
        return metrics, actor.state_dict()

    metrics, weights = train(disturb=False)
    disturbed_metrics, disturbed_weights = train(disturb=True)
    assert metrics == disturbed_metrics and metrics["actor/grad_norm"] > 0
    for name, value in weights.items():
        assert torch.equal(disturbed_weights[name], value), name


def test_critic_values_read_inserted_tokens_and_are_zero_on_them(tiny_model_dir, rollout):
    critic = CriticWorker(tiny_model_dir, critic_settings(lr=1e-2), seed=0)
    forward = forward_settings()
    torch.nn.init.normal_(critic.value_head.weight, generator=torch.Generator().manual_seed(0))
    values = critic.values(rollout, settings=forward)
    assert (values[rollout.loss_mask == 0] == 0).all() and (values[rollout.loss_mask == 1] != 0).all()
    # a different tool answer changes the values of the turn after it
    changed = conversation_rollout_with(rollout, row=0, column=2, token=rollout.responses[0, 2] + 1)
    after = critic.values(changed, settings=forward)
    assert not torch.equal(after[0, 5:7], values[0, 5:7]) and torch.equal(after[0, :2], values[0, :2])


def conversation_rollout_with(rollout: Rollout, row: int, column: int, token: int) -> Rollout:
    responses = rollout.responses.clone()
    responses[row, column] = token
    lists = {name: getattr(rollout, name) for name in ("uid", "data_source", "ground_truth", "extra_info",
                                                       "prompt_text", "response_text")}
    return Rollout.build(rollout.prompts, rollout.attention_mask[:, : rollout.prompt_length], responses,
                         rollout.loss_mask, rollout.pad_token_id, token_source=rollout.token_source, **lists)
