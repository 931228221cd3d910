import io

import pytest
import torch

from .helpers import (critic_settings, critic_update_settings, forward_settings, generate_settings, make_items,
                      ref_settings)
from rlgraph.workers.critic import CriticWorker
from rlgraph.workers.policy import PolicyWorker

PROMPTS = ["12+34=", "5+6=", "7=", "99+1="]


@pytest.fixture(scope="module")
def rollout(tiny_model_dir, tokenizer):
    policy = PolicyWorker(tiny_model_dir, ref_settings(), seed=0)
    return policy.generate(make_items(PROMPTS, tokenizer), settings=generate_settings(n=2, max_new_tokens=5), seed=0)


def test_backbone_is_the_language_models_body(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    critic = CriticWorker(tiny_model_dir, critic_settings(), seed=0)
    body = critic.backbone.state_dict()
    for name, value in lm.model.state_dict().items():
        torch.testing.assert_close(body[name], value)


def test_values_shape_mask_and_zero_init(tiny_model_dir, rollout):
    critic = CriticWorker(tiny_model_dir, critic_settings(), seed=0)
    values = critic.values(rollout, settings=forward_settings(micro_batch=3))
    assert values.shape == rollout.responses.shape and values.dtype == torch.float32
    assert (values == 0).all()  # zero-initialised head
    torch.nn.init.normal_(critic.value_head.weight)
    values = critic.values(rollout, settings=forward_settings())
    assert (values[rollout.response_mask == 0] == 0).all()
    assert (values[rollout.response_mask == 1] != 0).all()


def test_values_do_not_depend_on_left_padding(tiny_model_dir, rollout):
    critic = CriticWorker(tiny_model_dir, critic_settings(), seed=0)
    torch.nn.init.normal_(critic.value_head.weight, generator=torch.Generator().manual_seed(0))
    full = critic.values(rollout, settings=forward_settings())
    for row in (0, 4):
        alone = critic.values(rollout.select([row]), settings=forward_settings())
        # the lone row keeps its padding columns; trim them off to get an unpadded batch
        torch.testing.assert_close(alone[0], full[row], atol=1e-5, rtol=1e-5)


def test_update_reduces_value_loss(tiny_model_dir, rollout):
    critic = CriticWorker(tiny_model_dir, critic_settings(lr=1e-2), seed=0)
    returns = torch.linspace(-1, 1, len(rollout)).unsqueeze(1) * rollout.response_mask  # (batch, R)
    settings = critic_update_settings(epochs=2, mini_batch_size=4, micro_batch=2)
    losses = []
    for _ in range(15):
        values = critic.values(rollout, settings=forward_settings())
        metrics = critic.update(rollout, values, returns, settings=settings)
        losses.append(metrics["critic/vf_loss"])
    assert losses[-1] < 0.5 * losses[0]
    names = {"critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/grad_norm", "critic/lr",
             "critic/skipped_update_frac"}
    assert set(metrics) == names


def test_save_load_and_checkpoint_states(tiny_model_dir, rollout, tmp_path):
    forward = forward_settings()
    critic = CriticWorker(tiny_model_dir, critic_settings(lr=1e-2), seed=0)
    returns = torch.ones(len(rollout), rollout.response_length) * rollout.response_mask
    critic.update(rollout, critic.values(rollout, settings=forward), returns, settings=critic_update_settings())
    critic.save(tmp_path / "critic")
    assert (tmp_path / "critic" / "value_head.safetensors").is_file()
    reloaded = CriticWorker(str(tmp_path / "critic"), critic_settings(), seed=0)
    torch.testing.assert_close(reloaded.values(rollout, settings=forward), critic.values(rollout, settings=forward))
    other = CriticWorker(tiny_model_dir, critic_settings(), seed=0)
    other.load(tmp_path / "critic")
    torch.testing.assert_close(other.values(rollout, settings=forward), critic.values(rollout, settings=forward))

    buffer = io.BytesIO()
    torch.save({"model": critic.state_dict(), "optim": critic.optimizer_state()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    fresh = CriticWorker(tiny_model_dir, critic_settings(lr=1e-2), seed=0)
    fresh.load_state_dict(saved["model"])
    fresh.load_optimizer_state(saved["optim"])
    for worker in (critic, fresh):
        worker.update(rollout, critic.values(rollout, settings=forward), returns, settings=critic_update_settings(),
                      shuffle=False)
    torch.testing.assert_close(fresh.values(rollout, settings=forward), critic.values(rollout, settings=forward))
