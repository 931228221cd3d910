"""Memory per device: hand computations of the formulas in docs/memory.md."""

from __future__ import annotations

import dataclasses
import json

from rlgraph.plan.memory import BUILTIN_MODELS, count_params

from .helpers import codes, line_of, only, plan_text, spec

GiB = 2**30
BIG = 'model big { path = "models/not-here"  params = 7B }'
QWEN = ('model big { path = "models/not-here"  params = 7B  layers = 28  hidden = 3584  heads = 28  kv_heads = 4 }')
PPO_STEP = """\
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  responses -> ref.log_prob -> ref_log_prob
  scores, old_log_prob, ref_log_prob -> kl_penalty -> rewards
  rewards -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update"""


def _row(plan, pool="gpus", node=0, device=0):
    return next(m for m in plan.memory if (m.pool, m.node, m.device) == (pool, node, device))


def test_7b_actor_adam_mixed_precision_fsdp_over_8_devices(tmp_path):
    text = spec("pool gpus { nodes = 1  devices_per_node = 8  device = gpu  memory = 80GiB }\n"
                "role actor { model = big  pool = gpus  replicas = 8  strategy = fsdp  dtype = bf16 }\n"
                "role rollout { colocate = actor  n = 4 }", model=BIG)
    plan, diagnostics = plan_text(tmp_path, text)
    assert "out-of-memory" not in codes(diagnostics)
    P, shards = 7_000_000_000, 8
    # Adam under mixed precision, per parameter (bf16 is the compute dtype; what is stored is fp32):
    params = P * 4 // shards  # fp32 master weights    4 B  -> 3.5e9 per device
    grads = P * 4 // shards  # fp32 gradients          4 B  -> 3.5e9
    adam = P * (4 + 4) // shards  # fp32 Adam m and v   8 B  -> 7.0e9
    assert (params, grads, adam) == (3_500_000_000, 3_500_000_000, 7_000_000_000)
    assert params + grads + adam == 7e9 * 16 / 8 == 14_000_000_000
    for device in range(8):
        row = _row(plan, device=device)
        actor = {k: v for k, v in row.breakdown.items() if k.startswith("actor/")}
        # no bf16 copy of the whole model: FSDP gathers one block at a time, in bf16
        assert actor == {"actor/params": params, "actor/grads": grads, "actor/optimizer": adam}
        assert sum(actor.values()) == 14_000_000_000
        assert row.capacity_bytes == 80 * GiB
    # the hf rollout generates with the actor's module: no second copy of the weights
    assert _row(plan).breakdown["rollout/weights"] == 0
    # the model block gives no attention shape: the KV cache is unknown, and said so
    warning = only(diagnostics, "memory-unknown")
    assert "KV cache of `rollout`" in warning.message and warning.severity == "warning"


def test_fp32_is_16_bytes_per_param_too_and_ddp_keeps_it_whole(tmp_path):
    text = spec("pool gpus { nodes = 1  devices_per_node = 8  device = gpu  memory = 80GiB }\n"
                "role actor { model = big  pool = gpus  replicas = 8 }\n"
                "role rollout { colocate = actor  n = 4 }", model=BIG)
    plan, diagnostics = plan_text(tmp_path, text)
    row = _row(plan)
    P = 7_000_000_000
    assert row.breakdown["actor/params"] == P * 4  # fp32 weights
    assert row.breakdown["actor/grads"] == P * 4  # fp32 gradients
    assert row.breakdown["actor/optimizer"] == P * 8  # Adam m and v
    assert "actor/compute_copy" not in row.breakdown  # fp32 computes on the weights themselves
    assert row.estimated_bytes == 112_000_000_000 > 80 * GiB
    d = only(diagnostics, "out-of-memory")
    assert "pool `gpus`" in d.message and "8 of 8 devices over" in d.message and "80 GiB" in d.message
    assert d.span.line == line_of(text, "memory = 80GiB") and text.splitlines()[d.span.line - 1][
        d.span.column - 1:d.span.end_column - 1] == "80GiB"
    # the biggest real cause first, in bytes per parameter; then the breakdown, largest first
    assert d.hints[0].startswith("`actor`'s training state alone is 16 bytes per parameter") and "104 GiB" in d.hints[0]
    assert "actor/optimizer 52.2 GiB" in d.hints[1]
    assert any("strategy = fsdp" in h and h.startswith("fits with") for h in d.hints[2:])


def test_bf16_under_ddp_adds_the_whole_bf16_compute_copy(tmp_path):
    """Unsharded, autocast casts every weight to bf16 for a forward (kept for its backward): 16 + 2 B/param."""
    text = spec("pool gpus { nodes = 1  devices_per_node = 2  device = gpu  memory = 80GiB }\n"
                "role actor { model = big  pool = gpus  replicas = 2  dtype = bf16 }\n"
                "role rollout { colocate = actor  n = 4 }", model=BIG)
    plan, _ = plan_text(tmp_path, text)
    P = 7_000_000_000
    actor = {k: v for k, v in _row(plan, device=1).breakdown.items() if k.startswith("actor/")}
    assert actor == {"actor/params": P * 4, "actor/grads": P * 4, "actor/optimizer": P * 8,
                     "actor/compute_copy": P * 2}


def test_kv_cache_of_a_rollout_on_its_own_pool(tmp_path):
    text = spec("pool gpus { nodes = 1  devices_per_node = 8  device = gpu  memory = 80GiB }\n"
                "role actor { model = big  pool = gpus  replicas = 4  strategy = fsdp  dtype = bf16 }\n"
                "role rollout { model = big  pool = gpus  replicas = 4  n = 8  max_new_tokens = 1024  dtype = bf16 }",
                model=QWEN, data="batch_size = 64  max_prompt_length = 512")
    plan, diagnostics = plan_text(tmp_path, text)
    assert "memory-unknown" not in codes(diagnostics)
    row = _row(plan, device=4)  # rollout replica 0 sits after the actor's 4 devices
    assert [k for k in row.breakdown] == ["rollout/weights", "rollout/kv_cache"]
    sequences = 64 * 8 // 4  # batch_size × n / rollout replicas = 128
    head_dim = 3584 // 28  # 128
    kv = 2 * 28 * 4 * head_dim * (512 + 1024) * sequences * 2  # K and V × layers × kv_heads × dim × tokens × seqs × bf16
    assert kv == 11_274_289_152
    assert row.breakdown["rollout/kv_cache"] == kv
    assert row.breakdown["rollout/weights"] == 7_000_000_000 * 2  # its own bf16 copy


def test_kv_cache_and_weights_split_over_tp(tmp_path):
    text = spec("pool gpus { nodes = 1  devices_per_node = 8  device = gpu  memory = 80GiB }\n"
                "role actor { model = big  pool = gpus  replicas = 4  strategy = fsdp  dtype = bf16 }\n"
                "role rollout { model = big  pool = gpus  replicas = 2  tp = 2  n = 8  max_new_tokens = 1024  "
                "dtype = bf16 }", model=QWEN, data="batch_size = 64  max_prompt_length = 512")
    plan, _ = plan_text(tmp_path, text)
    for device in (4, 5):  # the two devices of rollout replica 0
        row = _row(plan, device=device)
        # 2 replicas: 256 sequences each; 4 kv heads over tp 2: 2 heads per device
        assert row.breakdown["rollout/kv_cache"] == 2 * 28 * 2 * 128 * (512 + 1024) * 256 * 2
        assert row.breakdown["rollout/weights"] == 7_000_000_000 * 2 // 2


def test_sglang_keeps_its_own_copy_even_when_colocated_and_ref_follows_the_actors_sharding(tmp_path):
    text = spec("pool gpus { nodes = 1  devices_per_node = 8  device = gpu  memory = 80GiB }\n"
                "role actor { model = big  pool = gpus  replicas = 8  strategy = fsdp  dtype = bf16 }\n"
                "role rollout { colocate = actor  engine = sglang  tp = 2  n = 4  dtype = bf16 }\n"
                "role ref { model = big  colocate = actor  dtype = bf16 }", model=QWEN, step=PPO_STEP)
    plan, _ = plan_text(tmp_path, text)
    row = _row(plan, device=1)
    assert row.breakdown["rollout/weights"] == 7_000_000_000 * 2 // 2  # tp 2
    assert row.breakdown["ref/params"] == 7_000_000_000 * 2 // 8  # sharded like its fsdp root


def test_frozen_role_on_its_own_pool_holds_a_whole_copy(tmp_path):
    text = spec("pool gpus { nodes = 1  devices_per_node = 4  device = gpu  memory = 80GiB }\n"
                "pool refs { nodes = 1  devices_per_node = 2  device = gpu  memory = 80GiB }\n"
                "role actor { model = big  pool = gpus  replicas = 4  strategy = fsdp  dtype = bf16 }\n"
                "role rollout { colocate = actor  n = 4 }\n"
                "role ref { model = big  pool = refs  replicas = 2  dtype = bf16 }", model=BIG, step=PPO_STEP)
    plan, _ = plan_text(tmp_path, text)
    assert _row(plan, pool="refs", device=1).breakdown == {"ref/params": 7_000_000_000 * 2}


def test_params_from_config_json_qwen2_and_llama3():
    qwen2_5_7b = {"model_type": "qwen2", "vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944,
                  "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
                  "tie_word_embeddings": False}
    embed = 152064 * 3584
    layer = (3584 * 3584 + 3584) + 2 * (3584 * 512 + 512) + 3584 * 3584 + 3 * 3584 * 18944 + 2 * 3584
    assert count_params(qwen2_5_7b) == 28 * layer + 2 * embed + 3584 == 7_615_616_512  # "7.61B"
    llama3_8b = {"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336,
                 "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8}
    assert count_params(llama3_8b) == 8_030_261_248
    assert count_params({"hidden_size": 8}) is None


def test_model_folder_config_json_is_read_as_plain_json(tmp_path):
    folder = tmp_path / "tiny"
    folder.mkdir()
    config = {"model_type": "llama", "vocab_size": 100, "hidden_size": 32, "intermediate_size": 64,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "tie_word_embeddings": True}
    (folder / "config.json").write_text(json.dumps(config))
    text = spec("pool main { nodes = 1  devices_per_node = 1 }\n"
                "role actor { model = policy  pool = main }\n"
                "role rollout { colocate = actor  n = 2  max_new_tokens = 6 }",
                model='model policy { path = "tiny" }', data="batch_size = 4  max_prompt_length = 10")
    plan, diagnostics = plan_text(tmp_path, text)  # `tiny` is relative to the spec's folder
    assert "memory-unknown" not in codes(diagnostics)
    P = count_params(config)
    assert P == 2 * (32 * 32 * 2 + 2 * 32 * 16 + 3 * 32 * 64 + 2 * 32) + 100 * 32 + 32
    row = _row(plan, pool="main")
    assert row.breakdown["actor/params"] == P * 4
    # the KV cache exists only while rollout.generate runs; the device's peak is the update (a larger pass)
    assert "rollout/kv_cache" not in row.breakdown and "actor/activations" in row.breakdown
    assert row.estimated_bytes == sum(row.breakdown.values())
    assert row.capacity_bytes is None and "out-of-memory" not in codes(diagnostics)


def test_builtin_table_matches_the_builtin_model_recipe():
    from rlgraph.models.build_arith_gpt import Architecture
    from rlgraph.models.char_tokenizer import ALPHABET, SPECIAL_TOKENS

    arch = dataclasses.asdict(Architecture())
    table = BUILTIN_MODELS["builtin:arith-gpt"]
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "max_position_embeddings"):
        assert table[key] == arch[key], key
    assert table["num_key_value_heads"] == arch["num_attention_heads"]
    assert table["vocab_size"] == len(SPECIAL_TOKENS) + len(ALPHABET)
    assert count_params(table) == 265_920  # rlgraph_build.json of the built model says the same


def test_unknown_model_size_is_a_warning_not_an_error(tmp_path):
    text = spec("pool main { nodes = 1  devices_per_node = 1  memory = 1GiB }\n"
                "role actor { model = policy  pool = main }\n"
                "role rollout { colocate = actor  n = 2 }", model='model policy { path = "nowhere/at-all" }')
    plan, diagnostics = plan_text(tmp_path, text)
    unknown = [d for d in diagnostics if d.code == "memory-unknown"]
    assert unknown and all(d.severity == "warning" for d in unknown)
    assert any("add `params = 7B`" in h for d in unknown for h in d.hints)
    assert unknown[0].span.line == line_of(text, "nowhere/at-all")
    assert not any(d.is_error for d in diagnostics)
    assert _row(plan, pool="main").estimated_bytes == 0


def test_a_misspelt_built_in_model_is_named_not_asked_for_its_size(tmp_path):
    text = spec("pool main { nodes = 1  devices_per_node = 1  device = cpu }\n"
                "role actor { model = policy  pool = main }\n"
                "role rollout { colocate = actor  n = 4 }",
                model='model policy { path = "builtin:arith-gtp" }')
    _, diagnostics = plan_text(tmp_path, text)
    assert codes(diagnostics) == ["unknown-model"]  # once, not per role; and no "add `params = 7B`"
    d = only(diagnostics, "unknown-model")
    assert d.severity == "error" and d.message == "`builtin:arith-gtp` is not a built-in model"
    assert d.span.line == line_of(text, "builtin:arith-gtp")
    assert d.hints[0] == "did you mean `builtin:arith-gpt`?"
