"""builtin:arith-rm: the shipped model tells right sums from wrong ones; its build script's data, and a
short build that RewardModelWorker loads.

The full build (minutes on one core) made the shipped bytes and is not run here; its report is the
shipped rlgraph_build.json. This runs the same code with a few steps per phase."""

from __future__ import annotations

import dataclasses
import json

import torch

from rlgraph.models.build_arith_rm import Recipe, _near_misses, build_arith_rm
from rlgraph.models.registry import BUILTIN_MODELS


def test_the_shipped_model_tells_right_sums_from_near_misses_on_held_out_prompts():
    import random

    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from rlgraph.models import resolve_model_path
    from rlgraph.models.sequences import last_token_scores, left_pad, position_ids_from_mask
    from rlgraph.tasks import arith

    path = resolve_model_path("builtin:arith-rm")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path).eval()
    rng = random.Random(0)
    sequences = []
    for row in arith.make_rows("val"):  # prompts it never trained on
        prompt, answer = tokenizer(row["prompt"])["input_ids"], row["reward_model"]["ground_truth"]
        for text in [answer, *_near_misses(answer, 1, rng)]:  # (right, wrong) pairs
            sequences.append(prompt + tokenizer(text)["input_ids"] + [tokenizer.eos_token_id])
    input_ids, attention_mask = left_pad(sequences, tokenizer.pad_token_id)
    with torch.no_grad():
        scores = last_token_scores(model, input_ids, attention_mask, position_ids_from_mask(attention_mask))
    right, wrong = scores.view(-1, 2).unbind(1)  # (500,) each
    # measured on the shipped bytes: 0.854, 0.968, 0.960 (an untrained score head: 0.0, 1.0, 0.0)
    assert (right > 0.5).float().mean() >= 0.83  # pays a right answer
    assert (wrong < 0.5).float().mean() >= 0.95  # does not pay a near miss
    assert (right > wrong).float().mean() >= 0.93  # pays the right answer more than its near miss


def test_near_misses_are_wrong_and_close():
    import random

    rng = random.Random(0)
    for answer in ("0", "7", "10", "99", "138", "198"):
        misses = _near_misses(answer, 3, rng)
        assert len(misses) == len(set(misses)) == 3
        assert all(m != answer and m.isdigit() for m in misses)
        # off by up to 100 (a digit, a carry, a dropped or added digit), or the same digits reordered
        assert all(abs(int(m) - int(answer)) <= 100 or sorted(m) == sorted(answer) for m in misses), misses


def test_a_short_build_makes_a_reward_model_the_worker_loads(arith_gpt_dir, tmp_path):
    from rlgraph.data import RLDataset
    from rlgraph.tasks import arith
    from rlgraph.workers import PolicyWorker, RewardModelWorker
    from tests.workers.helpers import forward_settings, generate_settings, ref_settings, reward_model_settings

    recipe = dataclasses.replace(Recipe(), lm_steps=2, max_steps=2, eval_every=1, batch_size=32, policy_samples=1,
                                 near_misses=1, accept_accuracy=0.0)
    out = tmp_path / "rm"
    report = build_arith_rm(out, recipe, log=lambda _: None)
    assert {p.name for p in out.iterdir()} == set(BUILTIN_MODELS["arith-rm"].sha256)  # what is shipped
    saved = json.loads((out / "rlgraph_build.json").read_text())
    assert saved["steps"] == 4 and saved["initialized_from"] == "builtin:arith-gpt"
    assert {"accuracy", "accuracy_right", "accuracy_sample", "accuracy_near_miss"} <= set(saved["heldout"])
    assert 0.0 <= report["heldout"]["accuracy"] <= 1.0 and len(saved["checks"]) == 2

    policy = PolicyWorker(str(arith_gpt_dir), ref_settings(), seed=0)
    dataset = RLDataset(arith.make_rows("val")[:4], policy.tokenizer)
    rollout = policy.generate([dataset[i] for i in range(4)], settings=generate_settings(n=2, max_new_tokens=4), seed=0)
    scores = RewardModelWorker(str(out), reward_model_settings(), seed=0).score(rollout, settings=forward_settings())
    assert scores.shape == rollout.response_mask.shape and torch.isfinite(scores).all()
