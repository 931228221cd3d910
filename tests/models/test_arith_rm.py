"""builtin:arith-rm's build script: the data it learns from, and a short build that RewardModelWorker loads.

The full build (about 3.5 min on one core, 0.93 held-out accuracy) is not run here; its report is in
docs/results.md. This runs the same code with a few steps per phase."""

from __future__ import annotations

import dataclasses
import json

import torch

from rlgraph.models.build_arith_rm import MODEL_VERSION, Recipe, _near_misses, build_arith_rm
from rlgraph.models.registry import BUILTIN_MODELS


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

    assert BUILTIN_MODELS["arith-rm"].folder == f"arith-rm-v{MODEL_VERSION}"
    recipe = dataclasses.replace(Recipe(), lm_steps=2, max_steps=2, eval_every=1, batch_size=32, policy_samples=1,
                                 near_misses=1, accept_accuracy=0.0)
    out = tmp_path / "rm"
    report = build_arith_rm(out, recipe, log=lambda _: None)
    saved = json.loads((out / "rlgraph_build.json").read_text())
    assert saved["steps"] == 4 and saved["initialized_from"] == "builtin:arith-gpt"
    assert {"accuracy", "accuracy_right", "accuracy_sample", "accuracy_near_miss"} <= set(saved["heldout"])
    assert 0.0 <= report["heldout"]["accuracy"] <= 1.0 and len(saved["checks"]) == 2

    policy = PolicyWorker(str(arith_gpt_dir), trainable=False)
    dataset = RLDataset(arith.make_rows("val")[:4], policy.tokenizer)
    rollout = policy.generate([dataset[i] for i in range(4)], 2, seed=0, max_new_tokens=4)
    scores = RewardModelWorker(str(out)).score(rollout)
    assert scores.shape == rollout.response_mask.shape and torch.isfinite(scores).all()
