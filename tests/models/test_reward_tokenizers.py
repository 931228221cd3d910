"""Issue 15, item 12: a reward model of another model family (another tokenizer) is caught before the
run, and with `retokenize = true` it scores the decoded text in its own tokens, as verl does."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch

from tests.plan.helpers import REPO, plan_text
from tests.runtime.helpers import make_reward_model
from tests.workers.helpers import forward_settings, generate_settings, ref_settings, reward_model_settings

RM_SPEC = """\
rlgraph 1
model policy {{ path = "{policy}"{policy_extra} }}
model judge {{ path = "{judge}"{judge_extra} }}
pool cpu {{ devices_per_node = 2  device = cpu }}
role actor {{ model = policy  pool = cpu  replicas = 1 }}
role rollout {{ colocate = actor  n = 2 }}
role rm {{ kind = reward_model  model = judge  pool = cpu{rm_extra} }}
data {{ train = "builtin:arith/train"  batch_size = 8 }}
step {{
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> rm.score -> scores
  responses -> actor.log_prob -> old_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update
}}
"""


def mismatches(tmp_path, **fields):
    values = {"policy": "/models/qwen", "judge": "/models/llama-rm", "policy_extra": "", "judge_extra": "",
              "rm_extra": ""} | fields
    text = RM_SPEC.format(**values)
    _, diagnostics = plan_text(tmp_path, text)
    return [(d.code, d.span.line) for d in diagnostics if d.code == "tokenizer-mismatch"]


def test_different_vocabularies_are_an_error_at_the_reward_models_model_line(tmp_path):
    found = mismatches(tmp_path, policy_extra="  params = 7B  vocab = 152064", judge_extra="  params = 8B  vocab = 128256")
    assert found == [("tokenizer-mismatch", 7)]
    assert mismatches(tmp_path, policy_extra="  vocab = 152064", judge_extra="  vocab = 128256",
                      rm_extra="  retokenize = true") == []
    assert mismatches(tmp_path, policy_extra="  vocab = 152064", judge_extra="  vocab = 152064") == []


def test_local_tokenizers_are_compared_by_their_files(tmp_path, arith_gpt_dir):
    same = tmp_path / "same"
    shutil.copytree(arith_gpt_dir, same)
    assert mismatches(tmp_path, policy=str(arith_gpt_dir), judge=str(same)) == []
    other = tmp_path / "other"
    shutil.copytree(arith_gpt_dir, other)
    data = json.loads((other / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    first, second = sorted(vocab, key=vocab.get)[4:6]  # two characters swap ids: same size, other meaning
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (other / "tokenizer.json").write_text(json.dumps(data))
    assert mismatches(tmp_path, policy=str(arith_gpt_dir), judge=str(other)) == [("tokenizer-mismatch", 7)]


def test_the_shipped_7b_spec_scores_with_the_reward_models_own_tokenizer():
    from rlgraph.compiler import compile_spec
    from rlgraph.plan.build import plan_spec

    plan, diagnostics = plan_spec(compile_spec(str(REPO / "specs" / "ppo_qwen7b_rm_2x8.rl")))
    assert not [d for d in diagnostics if d.code == "tokenizer-mismatch"]
    assert plan.role("rm").settings.retokenize is True


@pytest.fixture(scope="module")
def rollout_and_rm(arith_gpt_dir, tmp_path_factory):
    from rlgraph.data import RLDataset
    from rlgraph.tasks import arith
    from rlgraph.workers import PolicyWorker

    rm_dir = make_reward_model(arith_gpt_dir, tmp_path_factory.mktemp("rm"))
    policy = PolicyWorker(str(arith_gpt_dir), ref_settings(), seed=0)
    dataset = RLDataset(arith.make_rows("val")[:3], policy.tokenizer)
    rollout = policy.generate([dataset[i] for i in range(len(dataset))],
                              settings=generate_settings(n=2, max_new_tokens=4), seed=0)
    return rollout, rm_dir


def test_ids_of_a_larger_vocabulary_are_a_clear_error_not_a_device_assert(rollout_and_rm):
    from rlgraph.workers import RewardModelWorker

    rollout, rm_dir = rollout_and_rm
    worker = RewardModelWorker(str(rm_dir), reward_model_settings(), seed=0)
    foreign = dataclasses.replace(rollout, input_ids=rollout.input_ids + 1000)  # ids of a 1000-larger vocabulary
    with pytest.raises(ValueError, match=r"token id \d+ but the reward model's vocabulary has 50 entries.*retokenize"):
        worker.score(foreign, settings=forward_settings())


def test_retokenize_scores_the_text_in_the_reward_models_own_tokens(rollout_and_rm):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from rlgraph.workers import RewardModelWorker

    rollout, rm_dir = rollout_and_rm
    worker = RewardModelWorker(str(rm_dir), reward_model_settings(retokenize=True), seed=0)
    foreign = dataclasses.replace(rollout, input_ids=rollout.input_ids + 1000)  # the ids are not read at all
    scores = worker.score(foreign, settings=forward_settings(micro_batch=4))
    model = AutoModelForSequenceClassification.from_pretrained(rm_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(rm_dir)
    for row in range(len(rollout)):
        ids = tokenizer(rollout.prompt_text[row] + rollout.response_text[row], return_tensors="pt")["input_ids"]
        with torch.no_grad():
            expected = model(input_ids=ids).logits[0, 0]
        assert torch.allclose(scores[row, rollout.reward_index[row]], expected, atol=1e-5)
        assert torch.count_nonzero(scores[row]) == 1
