import io

import pytest
import torch

from .helpers import make_items
from rlgraph.workers.critic import CriticWorker
from rlgraph.workers.policy import PolicyWorker

PROMPTS = ["12+34=", "5+6=", "7=", "99+1="]


@pytest.fixture(scope="module")
def rollout(tiny_model_dir, tokenizer):
    policy = PolicyWorker(tiny_model_dir, trainable=False)
    return policy.generate(make_items(PROMPTS, tokenizer), n=2, max_new_tokens=5, seed=0)


def test_backbone_is_the_language_models_body(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    critic = CriticWorker(tiny_model_dir)
    body = critic.backbone.state_dict()
    for name, value in lm.model.state_dict().items():
        torch.testing.assert_close(body[name], value)


def test_values_shape_mask_and_zero_init(tiny_model_dir, rollout):
    critic = CriticWorker(tiny_model_dir)
    values = critic.values(rollout, micro_batch_size=3)
    assert values.shape == rollout.responses.shape and values.dtype == torch.float32
    assert (values == 0).all()  # zero-initialised head
    torch.nn.init.normal_(critic.value_head.weight)
    values = critic.values(rollout)
    assert (values[rollout.response_mask == 0] == 0).all()
    assert (values[rollout.response_mask == 1] != 0).all()


def test_values_do_not_depend_on_left_padding(tiny_model_dir, rollout):
    critic = CriticWorker(tiny_model_dir)
    torch.nn.init.normal_(critic.value_head.weight, generator=torch.Generator().manual_seed(0))
    full = critic.values(rollout)
    for row in (0, 4):
        alone = critic.values(rollout.select([row]))
        # the lone row keeps its padding columns; trim them off to get an unpadded batch
        torch.testing.assert_close(alone[0], full[row], atol=1e-5, rtol=1e-5)


def test_update_reduces_value_loss(tiny_model_dir, rollout):
    critic = CriticWorker(tiny_model_dir, lr=1e-2)
    returns = torch.linspace(-1, 1, len(rollout)).unsqueeze(1) * rollout.response_mask  # (batch, R)
    losses = []
    for _ in range(15):
        values = critic.values(rollout)
        metrics = critic.update(rollout, values, returns, epochs=2, mini_batch_size=4, micro_batch_size=2)
        losses.append(metrics["critic/vf_loss"])
    assert losses[-1] < 0.5 * losses[0]
    names = {"critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/grad_norm", "critic/lr"}
    assert set(metrics) == names


def test_save_load_and_checkpoint_states(tiny_model_dir, rollout, tmp_path):
    critic = CriticWorker(tiny_model_dir, lr=1e-2)
    returns = torch.ones(len(rollout), rollout.response_length) * rollout.response_mask
    critic.update(rollout, critic.values(rollout), returns)
    critic.save(tmp_path / "critic")
    assert (tmp_path / "critic" / "value_head.safetensors").is_file()
    reloaded = CriticWorker(str(tmp_path / "critic"))
    torch.testing.assert_close(reloaded.values(rollout), critic.values(rollout))
    other = CriticWorker(tiny_model_dir)
    other.load(tmp_path / "critic")
    torch.testing.assert_close(other.values(rollout), critic.values(rollout))

    buffer = io.BytesIO()
    torch.save({"model": critic.state_dict(), "optim": critic.optimizer_state()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    fresh = CriticWorker(tiny_model_dir, lr=1e-2)
    fresh.load_state_dict(saved["model"])
    fresh.load_optimizer_state(saved["optim"])
    for worker in (critic, fresh):
        worker.update(rollout, critic.values(rollout), returns, shuffle=False)
    torch.testing.assert_close(fresh.values(rollout), critic.values(rollout))
