"""LoRA on the actor (rlgraph/workers/lora.py): what trains, the reference as the base, checkpoints, weight sync."""

import copy
import json

import pytest
import torch

from .helpers import (actor_settings, generate_settings, log_prob_settings, make_items, ref_settings,
                      rollout_settings, update_settings)
from rlgraph.contract.settings import LoraSettings
from rlgraph.workers.batch import Rollout
from rlgraph.workers.policy import BasePolicy, PolicyWorker
from rlgraph.workers.rollout import RolloutWorker
from tests.tolerances import FP32_REORDERED

PROMPTS = ["12+34=", "5+6=", "7=", "99+1="]
LORA = LoraSettings(rank=4, alpha=8.0, dropout=0.0, target_modules="all-linear")


def lora_actor(path, **overrides) -> PolicyWorker:
    return PolicyWorker(path, actor_settings(lr=1e-2, lora=overrides.pop("lora", LORA), **overrides), seed=0)


@pytest.fixture
def actor(tiny_model_dir):
    return lora_actor(tiny_model_dir)


@pytest.fixture
def rollout(actor, tokenizer) -> Rollout:
    return actor.generate(make_items(PROMPTS, tokenizer), settings=generate_settings(n=2, max_new_tokens=5), seed=0)


def push(actor: PolicyWorker, rollout: Rollout, steps: int = 2) -> dict[str, float]:
    """Updates that push one response up: the adapters must move."""
    old = actor.log_prob(rollout, settings=log_prob_settings())
    advantages = torch.full_like(old, -0.1)
    advantages[1] = 1.0
    for _ in range(steps):
        metrics = actor.update(rollout, old, advantages * rollout.response_mask,
                               settings=update_settings(mini_batch_size=4), shuffle_seed=7)
    return metrics


def test_only_the_adapters_train(actor, rollout):
    named = dict(actor.module.named_parameters())
    trainable = {name for name, p in named.items() if p.requires_grad}
    assert trainable and all(".lora_A." in name or ".lora_B." in name for name in trainable)
    # all-linear: the 7 projections of each of the 2 blocks, never the (tied) output head
    assert len(trainable) == 2 * 7 * 2
    assert {id(p) for p in actor.optim.params} == {id(named[name]) for name in trainable}
    before = {name: p.detach().clone() for name, p in named.items()}
    push(actor, rollout)
    changed = {name for name, p in actor.module.named_parameters() if not torch.equal(p, before[name])}
    assert changed and changed <= trainable
    assert any(".lora_B." in name for name in changed)  # B starts at 0: the adapters' output moved


def test_base_policy_equals_the_base_model(actor, rollout, tiny_model_dir):
    push(actor, rollout)
    ref = PolicyWorker(tiny_model_dir, ref_settings(), seed=1)  # the base model, loaded on its own
    settings = log_prob_settings()
    base = BasePolicy(actor).log_prob(rollout, settings=settings)
    torch.testing.assert_close(base, ref.log_prob(rollout, settings=settings), **FP32_REORDERED)
    trained = actor.log_prob(rollout, settings=settings)  # the adapters are back on afterwards
    assert not torch.allclose(trained, base, atol=1e-4)


def test_base_policy_top_k_is_the_base_model_s(actor, rollout, tiny_model_dir):
    """A ref on a LoRA actor's base (the adapters off) gives the base model's top-k too, as a teacher would."""
    from .test_distill import top_k_settings

    push(actor, rollout)
    ref = PolicyWorker(tiny_model_dir, ref_settings(), seed=1)
    settings = top_k_settings(k=3)
    base = BasePolicy(actor).top_k(rollout, settings=settings)
    expected = ref.top_k(rollout, settings=settings)
    mask = rollout.response_mask.bool()
    torch.testing.assert_close(base[mask], expected[mask], **FP32_REORDERED)
    assert not torch.allclose(actor.top_k(rollout, settings=settings)[mask][..., 0], base[mask][..., 0], atol=1e-4)


def test_checkpoint_loads_with_peft_and_resumes_exactly(actor, rollout, tiny_model_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    push(actor, rollout)
    folder = tmp_path / "actor"
    actor.save(folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    assert (folder / "adapter_model.safetensors").is_file() and not (folder / "model.safetensors").exists()
    assert config["r"] == 4 and config["base_model_name_or_path"] == actor.base_path

    # peft on its own: the base named in adapter_config.json plus these adapters scores as the actor does
    base = AutoModelForCausalLM.from_pretrained(config["base_model_name_or_path"])
    loaded = PeftModel.from_pretrained(base, str(folder)).eval()
    with torch.no_grad():
        expected = actor.module(input_ids=rollout.input_ids, attention_mask=rollout.attention_mask).logits
        torch.testing.assert_close(loaded(input_ids=rollout.input_ids, attention_mask=rollout.attention_mask).logits,
                                   expected, **FP32_REORDERED)

    # resume: the folder + the optimizer state give the same next update, bit for bit
    optimizer = copy.deepcopy(actor.optimizer_state())  # as written to disk: not the live tensors
    resumed = lora_actor(str(folder))
    resumed.load_optimizer_state(optimizer)
    assert resumed.base_path == actor.base_path
    push(actor, rollout, steps=1)
    push(resumed, rollout, steps=1)
    for (name, a), (_, b) in zip(actor.module.state_dict().items(), resumed.module.state_dict().items()):
        assert torch.equal(a, b), name


def test_resume_with_other_lora_settings_is_a_clear_error(actor, tmp_path):
    actor.save(tmp_path / "actor")
    with pytest.raises(ValueError, match="trained with .*'r': 4.*resume with the same settings"):
        lora_actor(str(tmp_path / "actor"), lora=LoraSettings(8, 16.0, 0.0, "all-linear"))


def test_rollout_takes_the_merged_weights(actor, rollout, tiny_model_dir, tokenizer):
    push(actor, rollout)
    merged = actor.state_dict()
    assert not any("lora" in name or "base_layer" in name for name in merged)
    engine = RolloutWorker(tiny_model_dir, rollout_settings(), seed=0)
    engine.load_state_dict(merged)
    items = make_items(PROMPTS, tokenizer)
    greedy = generate_settings(n=1, temperature=0.0, max_new_tokens=5)
    assert torch.equal(engine.generate(items, settings=greedy).responses,
                       actor.generate(items, settings=greedy).responses)
    # the merged weights score as the actor does (to float rounding: W + BA vs W x + B A x)
    scored = PolicyWorker(tiny_model_dir, ref_settings(), seed=1)
    scored.module.load_state_dict(merged)
    torch.testing.assert_close(scored.log_prob(rollout, settings=log_prob_settings()),
                               actor.log_prob(rollout, settings=log_prob_settings()), atol=1e-5, rtol=0)


def test_weight_sync_streams_merged_weights(actor, rollout, tiny_model_dir):
    from rlgraph.workers import weight_sync

    push(actor, rollout)
    sent = []
    weight_sync.send_weights(actor.module, lambda t: sent.append(t.clone()))
    queue = iter(sent)
    engine = RolloutWorker(tiny_model_dir, rollout_settings(), seed=0)
    weight_sync.receive_weights(lambda t: t.copy_(next(queue)), engine.load_weights)
    for name, value in actor.state_dict().items():
        torch.testing.assert_close(engine.engine.module.state_dict()[name], value, atol=0, rtol=0)


def test_adapter_dropout_acts_only_in_updates(tiny_model_dir, rollout):
    actor = lora_actor(tiny_model_dir, lora=LoraSettings(4, 8.0, 0.5, "all-linear"))
    push(actor, rollout)  # B moves off 0, so dropout on A's input would change the output
    settings = log_prob_settings()
    first = actor.log_prob(rollout, settings=settings)
    torch.testing.assert_close(actor.log_prob(rollout, settings=settings), first, atol=0, rtol=0)
    assert not any(m.training for m in actor.module.modules())  # scoring and generation run without dropout
