"""Model facts of config.json in the memory estimate: a mixture of experts holds all its experts (weights,
grads, Adam state) and runs the ones a token is routed to (activations); head_dim as config.json or the model
block gives it, not hidden / heads."""

from __future__ import annotations

import json

from rlgraph.plan.memory import ModelShape, count_params, experts_of

from .helpers import plan_text, spec
from .test_memory import _row

# Qwen3-30B-A3B's config.json (the facts the memory estimate reads)
QWEN3_MOE = {"model_type": "qwen3_moe", "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144,
             "moe_intermediate_size": 768, "num_hidden_layers": 48, "num_attention_heads": 32,
             "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
             "decoder_sparse_step": 1, "mlp_only_layers": [], "tie_word_embeddings": False}
POOL = "pool gpus { nodes = 1  devices_per_node = 8  device = gpu  memory = 80GiB }\n"


def test_qwen3_30b_a3b_counts_every_expert_and_runs_eight():
    total = count_params(QWEN3_MOE)
    h, q, kv, e = 2048, 32 * 128, 4 * 128, 768
    attention = 2 * h * q + 2 * h * kv + 2 * 128  # q, o; k, v; q_norm, k_norm
    layer = attention + 128 * 3 * h * e + h * 128 + 2 * h  # 128 experts, the router, two RMSNorms
    assert total == 48 * layer + 2 * 151936 * h + h
    assert 30.4e9 < total < 30.6e9  # the model card: 30.5B in total
    shape = ModelShape(params=total, layers=48, hidden=h, moe=experts_of(QWEN3_MOE), intermediate=6144)
    assert 3.3e9 < shape.active_params < 3.4e9  # the model card: 3.3B activated
    assert shape.active_intermediate == 8 * 768


def test_shared_experts_and_dense_first_layers_are_counted():
    qwen2_moe = {**QWEN3_MOE, "model_type": "qwen2_moe", "num_experts": 60, "num_experts_per_tok": 4,
                 "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632}
    moe = experts_of(qwen2_moe)
    assert (moe.experts, moe.per_token, moe.shared_intermediate) == (60, 4, 5632)
    without = count_params({k: v for k, v in qwen2_moe.items() if k != "shared_expert_intermediate_size"})
    # the shared experts' MLP and its one-score gate, in each of the 48 sparse layers
    assert count_params(qwen2_moe) - without == 48 * (3 * 2048 * 5632 + 2048)
    dense_first = {**QWEN3_MOE, "first_k_dense_replace": 3}
    assert experts_of(dense_first).layers(48) == 45
    assert count_params(QWEN3_MOE) - count_params(dense_first) == 3 * (128 * 3 * 2048 * 768 + 2048 * 128
                                                                       - 3 * 2048 * 6144)
    assert count_params({**QWEN3_MOE, "kv_lora_rank": 512}) is None  # DeepSeek's MLA is not counted as q/k/v/o


def _moe_plan(tmp_path, config: dict, name: str):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    text = spec(POOL + "role actor { model = big  pool = gpus  replicas = 8  strategy = fsdp  dtype = bf16 "
                "micro_batch = 1 }\nrole rollout { colocate = actor  n = 4 }",
                model=f'model big {{ path = "{folder}" }}')
    plan, diagnostics = plan_text(tmp_path, text, name=f"{name}.rl")
    return _row(plan).breakdown, diagnostics


def test_memory_holds_all_experts_and_activations_follow_the_routed_ones(tmp_path):
    full, _ = _moe_plan(tmp_path, QWEN3_MOE, "a3b")
    assert full["actor/params"] == -(-count_params(QWEN3_MOE) * 4 // 8)  # all 30.5B, fp32 master, 8 shards
    assert full["actor/optimizer"] == -(-count_params(QWEN3_MOE) * 8 // 8)
    half, _ = _moe_plan(tmp_path, {**QWEN3_MOE, "num_experts": 64}, "e64")
    assert half["actor/params"] < 0.55 * full["actor/params"]
    assert half["actor/activations"] == full["actor/activations"]  # the same 8 experts a token
    wider, _ = _moe_plan(tmp_path, {**QWEN3_MOE, "num_experts_per_tok": 16}, "k16")
    assert wider["actor/params"] == full["actor/params"]
    assert wider["actor/activations"] > full["actor/activations"]


def test_the_model_block_says_experts_as_config_json_does(tmp_path):
    from_config, _ = _moe_plan(tmp_path, QWEN3_MOE, "cfg")
    text = spec(POOL + "role actor { model = big  pool = gpus  replicas = 8  strategy = fsdp  dtype = bf16 "
                "micro_batch = 1 }\nrole rollout { colocate = actor  n = 4 }",
                model=(f'model big {{ path = "Qwen/Qwen3-30B-A3B"  params = {count_params(QWEN3_MOE)}  layers = 48 '
                       "hidden = 2048  heads = 32  kv_heads = 4  head_dim = 128  vocab = 151936  intermediate = 6144 "
                       "experts = 128  experts_per_token = 8  expert_intermediate = 768 }"))
    plan, diagnostics = plan_text(tmp_path, text, name="spec.rl")
    assert not [d for d in diagnostics if d.is_error and d.code != "out-of-memory"], diagnostics
    assert _row(plan).breakdown == from_config


def test_head_dim_from_config_json_and_from_the_model_block(tmp_path):
    qwen3_4b = {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 2560, "intermediate_size": 9728,
                "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                "tie_word_embeddings": True}
    folder = tmp_path / "qwen3-4b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(qwen3_4b))
    roles = ("role actor { model = m  pool = gpus  replicas = 4  strategy = fsdp  dtype = bf16  micro_batch = 8 }\n"
             "role rollout { model = m  pool = gpus  replicas = 4  n = 8  dtype = bf16 }")

    def kv(model: str, name: str) -> int:
        plan, _ = plan_text(tmp_path, spec(POOL + roles, model=model), name=name)
        return _row(plan, device=4).breakdown["rollout/kv_cache"]  # rollout replica 0, after the actor's 4

    from_config = kv(f'model m {{ path = "{folder}" }}', "a.rl")
    block = 'model m { path = "Qwen/Qwen3-4B"  params = 4.0B  layers = 36  hidden = 2560  heads = 32  kv_heads = 8 '
    assert kv(block + " head_dim = 128 }", "b.rl") == from_config
    assert kv(block + " }", "c.rl") * 128 == from_config * 80  # without head_dim: 2560 / 32 = 80, too small


def test_experts_without_their_size_is_a_warning_at_the_key(tmp_path):
    text = spec(POOL + "role actor { model = big  pool = gpus  replicas = 8  strategy = fsdp  dtype = bf16 }\n"
                "role rollout { colocate = actor  n = 4 }",
                model='model big { path = "Qwen/Qwen3-30B-A3B"  params = 30.5B  layers = 48  hidden = 2048 '
                      "heads = 32  kv_heads = 4  head_dim = 128  vocab = 151936  experts = 128 }")
    _, diagnostics = plan_text(tmp_path, text)
    unknown = [d for d in diagnostics if d.code == "memory-unknown"]
    assert len(unknown) == 1 and "`experts_per_token`, `expert_intermediate`" in unknown[0].message
    line = text.splitlines()[unknown[0].span.line - 1]
    assert line[:unknown[0].span.column - 1].endswith("experts = ")  # at the value of `experts`


def test_the_model_settings_hold_every_key_of_the_model_block():
    """ModelSettings is the model block resolved: a key added to the schema and not to the settings (or the
    other way) would be read by nothing, or by a resolver that finds no such key."""
    import dataclasses

    from rlgraph.contract.settings import ModelSettings
    from rlgraph.lang.schema import BLOCKS

    fields = [f.name for f in dataclasses.fields(ModelSettings) if f.name != "name"]
    assert fields == list(BLOCKS["model"].keys)
