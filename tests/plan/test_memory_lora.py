"""The memory model of a LoRA actor (docs/memory.md): grads and Adam state only for the adapters, and a ref on
the actor's model and devices that holds nothing (the actor's base with the adapters off)."""

from __future__ import annotations

import json

from rlgraph.plan.memory import count_params

from .helpers import codes, plan_text, spec
from .test_memory import PPO_STEP, _row

# a Qwen2.5-7B-shaped config.json (GQA: 28 heads, 4 key/value heads of 128)
QWEN = {"model_type": "qwen2", "vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944,
        "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4, "tie_word_embeddings": False}


def lora_spec(tmp_path, lora: str, ref: str = "role ref { model = big  colocate = actor }") -> str:
    folder = tmp_path / "qwen"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(QWEN))
    return spec("pool gpus { nodes = 1  devices_per_node = 8  device = gpu  memory = 80GiB }\n"
                f"role actor {{ model = big  pool = gpus  replicas = 8  {lora} }}\n"
                f"role rollout {{ colocate = actor  n = 4 }}\n{ref}", step=PPO_STEP,
                model=f'model big {{ path = "{folder}" }}')


def test_lora_trains_only_the_adapters_and_the_ref_is_the_base(tmp_path):
    plan, diagnostics = plan_text(tmp_path, lora_spec(tmp_path, "lora { rank = 16 }"))
    assert not [d for d in diagnostics if d.is_error], diagnostics
    P = count_params(QWEN)
    h, q, kv, i = 3584, 28 * 128, 4 * 128, 18944
    # rank x (in + out) for q, k, v, o, gate, up, down of each of the 28 blocks; never the output head
    adapters = 28 * 16 * ((h + q) + 2 * (h + kv) + (q + h) + 2 * (h + i) + (i + h))
    assert adapters == 40_370_176  # 0.5% of the model
    actor = {k: v for k, v in _row(plan).breakdown.items()
             if k.startswith("actor/") and k not in ("actor/activations", "actor/logits")}  # the update's pass
    assert actor == {"actor/params": P * 4, "actor/adapters": adapters * 4, "actor/grads": adapters * 4,
                     "actor/optimizer": adapters * 8}
    assert _row(plan).breakdown["ref/params"] == 0  # no second copy of the weights

    full, _ = plan_text(tmp_path, lora_spec(tmp_path, ""), name="full.rl")
    full_actor = {k: v for k, v in _row(full).breakdown.items()
                  if k.startswith("actor/") and k not in ("actor/activations", "actor/logits")}
    assert full_actor == {"actor/params": P * 4, "actor/grads": P * 4, "actor/optimizer": P * 8}
    assert _row(full).breakdown["ref/params"] == P * 4  # full fine-tuning: the ref is a copy of its own
    assert sum(actor.values()) < 0.3 * sum(full_actor.values())


def test_named_targets_and_a_ref_on_its_own_pool(tmp_path):
    ref = ("pool refs { nodes = 1  devices_per_node = 1  device = gpu  memory = 80GiB }\n"
           "role ref { model = big  pool = refs }")
    text = lora_spec(tmp_path, 'lora { rank = 8  target_modules = ["q_proj", "v_proj"] }', ref=ref)
    plan, diagnostics = plan_text(tmp_path, text)
    assert not [d for d in diagnostics if d.is_error], diagnostics
    adapters = 28 * 8 * ((3584 + 28 * 128) + (3584 + 4 * 128))
    assert _row(plan).breakdown["actor/grads"] == adapters * 4
    assert _row(plan, pool="refs").breakdown["ref/params"] == count_params(QWEN) * 4  # on its own devices: a copy


def test_lora_only_on_the_actor(tmp_path):
    text = spec("pool main { nodes = 1  devices_per_node = 1 }\n"
                "role actor { model = policy  pool = main }\n"
                "role rollout { colocate = actor  lora { rank = 4 } }")
    _, diagnostics = plan_text(tmp_path, text)
    assert "unknown-key" in codes(diagnostics)
    assert any("has no block `lora`" in d.message for d in diagnostics)
    _, diagnostics = plan_text(tmp_path, spec("pool main { nodes = 1  devices_per_node = 1 }\n"
                                              "role actor { model = policy  pool = main  "
                                              "lora { rank = 4  target_modules = 3 } }\n"
                                              "role rollout { colocate = actor }"), name="b.rl")
    assert "wrong-type" in codes(diagnostics)
