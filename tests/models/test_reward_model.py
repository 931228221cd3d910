"""RewardModelWorker: a sequence classifier's score on the last valid token, placed on the last
response token (verl's compute_rm_score)."""

from __future__ import annotations

import dataclasses

import torch

from rlgraph.workers.batch import EpisodeSummary
from tests.runtime.helpers import make_reward_model
from tests.workers.helpers import forward_settings, generate_settings, ref_settings, reward_model_settings


def test_scores_sit_on_the_last_response_token_and_match_the_classifier(arith_gpt_dir, tmp_path):
    from transformers import AutoModelForSequenceClassification

    from rlgraph.workers import PolicyWorker, RewardModelWorker
    from rlgraph.tasks import arith

    rm_dir = make_reward_model(arith_gpt_dir, tmp_path / "rm")
    policy = PolicyWorker(str(arith_gpt_dir), ref_settings(), seed=0)
    from rlgraph.data import RLDataset

    dataset = RLDataset(arith.make_rows("val")[:4], policy.tokenizer)
    rows = [dataset[i] for i in range(len(dataset))]
    rollout = policy.generate(rows, settings=generate_settings(n=2, max_new_tokens=4), seed=0)
    worker = RewardModelWorker(str(rm_dir), reward_model_settings(), seed=0)
    scores = worker.score(rollout, settings=forward_settings(micro_batch=3))  # (8, R)
    assert scores.shape == rollout.responses.shape and scores.dtype == torch.float32
    last = rollout.reward_index  # one model turn: its last token
    assert torch.equal(last, rollout.loss_mask.sum(1) - 1)
    assert torch.count_nonzero(scores) == len(rollout)  # one score per sequence...
    assert torch.equal(scores.nonzero()[:, 1], last)  # ...on its last response token
    # the same number the classifier gives the sequence alone (no padding at all)
    model = AutoModelForSequenceClassification.from_pretrained(rm_dir).eval()
    for row in range(len(rollout)):
        ids = rollout.input_ids[row][rollout.attention_mask[row].bool()][None]
        with torch.no_grad():
            expected = model(input_ids=ids).logits[0, 0]
        assert torch.allclose(scores[row, last[row]], expected, atol=1e-5)
    # the score goes where the rollout says its reward sits (a multi-turn row: after the last model turn)
    moved = dataclasses.replace(rollout, reward_index=torch.zeros_like(last))
    # same micro-batches as `scores`: another batch shape may round the last bit differently
    moved_scores = worker.score(moved, settings=forward_settings(micro_batch=3))
    assert torch.equal(moved_scores[:, 0], scores[torch.arange(len(rollout)), last])
    # a sample whose environment failed (rlgraph/workers/episodes.py) scores 0, as a rule reward gives it
    episodes = [EpisodeSummary(turns=1, tool_calls=0, tool_errors=0, model_tokens=1, env_tokens=0, env_reward=0.0,
                               failure="raised: boom" if row == 1 else None) for row in range(len(rollout))]
    failed = dataclasses.replace(rollout, episodes=episodes)
    failed_scores = worker.score(failed, settings=forward_settings(micro_batch=3))
    assert failed_scores[1].abs().sum() == 0 and scores[1, last[1]] != 0
    assert torch.equal(failed_scores[0], scores[0]) and torch.equal(failed_scores[2:], scores[2:])
