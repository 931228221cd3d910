"""The rollout's shared half (rlgraph/workers/rollout.py): engine output -> Rollout, and RolloutWorker."""

import pytest
import torch

from .helpers import EOS, PAD, actor_settings, generate_settings, make_items, rollout_settings
from rlgraph.workers import PolicyWorker, RolloutWorker
from rlgraph.workers.engines import Generation
from rlgraph.workers.rollout import build_rollout
from tests.tolerances import FP32_REORDERED

PROMPTS = ["12+34=", "5+6=", "7=", "99+1="]


@pytest.fixture
def rollout_worker(tiny_model_dir):
    return RolloutWorker(tiny_model_dir, rollout_settings(), seed=0)


def test_build_rollout_pads_masks_and_decodes(tokenizer):
    items = make_items(["1+2=", "3="], tokenizer, ["3", "3"])
    generation = Generation([[4, 5, EOS], [6], [EOS], [7, 8, 9, 10]], [[-1.0, -2.0, -3.0], [-4.0], [-5.0],
                                                                       [-6.0, -7.0, -8.0, -9.0]])
    rollout = build_rollout(items, 2, generation, tokenizer, PAD, 4, uid_offset=5, policy_version=3)
    assert rollout.responses.tolist() == [[4, 5, EOS, PAD], [6, PAD, PAD, PAD], [EOS, PAD, PAD, PAD], [7, 8, 9, 10]]
    assert rollout.response_mask.tolist() == [[1, 1, 1, 0], [1, 0, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1]]
    assert rollout.sample_log_probs.tolist() == [[-1, -2, -3, 0], [-4, 0, 0, 0], [-5, 0, 0, 0], [-6, -7, -8, -9]]
    assert rollout.prompts[2].tolist() == [PAD, PAD] + tokenizer("3=")["input_ids"]  # left-padded, repeated n times
    assert rollout.uid == [5, 5, 6, 6] and rollout.prompt_text == ["1+2=", "1+2=", "3=", "3="]
    chars = tokenizer.convert_ids_to_tokens([4, 5, 6, 7, 8, 9, 10])
    assert rollout.response_text == [chars[0] + chars[1], chars[2], "", "".join(chars[3:])]
    assert rollout.policy_version.tolist() == [3, 3, 3, 3]
    with pytest.raises(RuntimeError, match="returned 3 samples .* expected 2 prompts x n=2"):
        build_rollout(items, 2, Generation([[4], [4], [4]]), tokenizer, PAD, 4)


def test_a_rollout_worker_samples_like_the_hybrid_engine(rollout_worker, tiny_model_dir, tokenizer):
    # moving the rollout onto its own devices does not change what a seed samples
    actor = PolicyWorker(tiny_model_dir, actor_settings(), seed=0)
    items = make_items(PROMPTS, tokenizer)
    settings = generate_settings(n=2, max_new_tokens=5, keep_log_probs=True)
    own = rollout_worker.generate(items, settings=settings, seed=4, uid_offset=8, policy_version=2)
    hybrid = actor.generate(items, settings=settings, seed=4, uid_offset=8)
    assert torch.equal(own.responses, hybrid.responses)
    # to the last float32 bit: torch picks other kernels for weights that require grad (the actor's)
    torch.testing.assert_close(own.sample_log_probs, hybrid.sample_log_probs, **FP32_REORDERED)
    assert own.uid == hybrid.uid and own.policy_version.tolist() == [2] * 8
    assert rollout_worker.capabilities.name == "hf"


def test_weight_sync_reaches_the_rollout_worker(rollout_worker, tiny_model_dir, tokenizer):
    actor = PolicyWorker(tiny_model_dir, actor_settings(), seed=0)
    with torch.no_grad():
        actor.module.model.norm.weight.mul_(-3.0)  # stands in for an update
    items = make_items(PROMPTS, tokenizer)
    greedy = generate_settings(max_new_tokens=5, temperature=0.0)
    assert not torch.equal(rollout_worker.generate(items, settings=greedy).responses,
                           actor.generate(items, settings=greedy).responses)
    rollout_worker.load_state_dict(actor.state_dict())
    assert torch.equal(rollout_worker.generate(items, settings=greedy).responses,
                       actor.generate(items, settings=greedy).responses)


def test_release_and_resume_through_the_worker(rollout_worker, tokenizer):
    items = make_items(PROMPTS[:1], tokenizer)
    settings = generate_settings(n=2, max_new_tokens=4)
    before = rollout_worker.generate(items, settings=settings, seed=1)
    rollout_worker.release_memory()
    with pytest.raises(RuntimeError, match="resume_memory"):
        rollout_worker.generate(items, settings=settings, seed=1)
    rollout_worker.resume_memory()
    assert torch.equal(rollout_worker.generate(items, settings=settings, seed=1).responses, before.responses)


def test_bad_settings_are_clear_errors(tiny_model_dir, rollout_worker, tokenizer):
    with pytest.raises(ValueError, match="unknown rollout engine 'nope'"):
        RolloutWorker(tiny_model_dir, rollout_settings(engine="nope"), seed=0)
    with pytest.raises(ValueError, match="memory_fraction must be in"):
        RolloutWorker(tiny_model_dir, rollout_settings(memory_fraction=1.5), seed=0)
    with pytest.raises(ValueError, match="at least one prompt"):
        rollout_worker.generate([], settings=generate_settings(n=2, max_new_tokens=4))
    with pytest.raises(ValueError, match="need n >= 1"):
        rollout_worker.generate(make_items(PROMPTS, tokenizer), settings=generate_settings(n=0, max_new_tokens=4))
