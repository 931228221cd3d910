"""Engines as they allocate memory, calls that run one at a time, activations and logits, and advice that fits
(docs/memory.md): hand computations, and verl's own launches written as specs (tests/plan/specs/verl_*.rl)."""

from __future__ import annotations

from rlgraph.compiler import compile_spec
from rlgraph.plan.build import plan_spec
from rlgraph.plan.memory_activations import Pass, activation_bytes, backward_peak

from .helpers import FIXTURES, codes, only, plan_text, spec
from .test_memory import PPO_STEP, QWEN, _row

GiB = 2**30
P = 7_000_000_000


def _fixture(name: str):
    return plan_spec(compile_spec(str(FIXTURES / name)))


def test_verl_ppo_with_sglang_on_8_devices_fits_and_generates_in_waves():
    plan, diagnostics = _fixture("verl_ppo_qwen2_7b_sglang.rl")
    assert "out-of-memory" not in codes(diagnostics) and "engine-memory" not in codes(diagnostics)
    # KV of one token on one device: K and V x 28 layers x 4 kv heads / tp 2 x 128 dims x bf16
    per_token = 2 * 28 * 2 * 128 * 2
    per_sequence = per_token * (4096 + 4096)
    pool = int(0.5 * 80 * GiB) - 7_600_000_000 * 2 // 2  # the fraction less its half of the bf16 weights
    concurrent = pool // per_sequence
    assert concurrent == 150
    note = only(diagnostics, "engine-batch")
    assert note.severity == "note" and not note.is_error
    assert "holds 150 sequences of 8,192 tokens at once" in note.message
    assert "1,024 samples a step run in 7 waves" in note.message  # 4096 prompts over 4 replicas: ceil(1024 / 150)
    row = _row(plan)
    # the engine is released while the trainer runs: its fraction and the update's grads are never summed
    assert not ({"rollout/kv_pool", "actor/grads"} <= row.breakdown.keys())
    assert not ({"rollout/kv_pool", "critic/grads"} <= row.breakdown.keys())
    assert row.estimated_bytes <= 80 * GiB


def test_the_same_engine_with_a_hundredth_of_the_device_cannot_hold_its_weights(tmp_path):
    text = spec("pool gpus { nodes = 1  devices_per_node = 8  device = gpu  memory = 80GiB }\n"
                "role actor { model = big  pool = gpus  replicas = 8  strategy = fsdp  dtype = bf16 }\n"
                "role rollout { colocate = actor  engine = sglang  memory_fraction = 0.01  dtype = bf16 }",
                model=QWEN, data="batch_size = 64  max_prompt_length = 512")
    _, diagnostics = plan_text(tmp_path, text)
    d = only(diagnostics, "engine-memory")
    assert d.is_error and "cannot hold its weights" in d.message and "13 GiB" in d.message  # 7e9 x 2 bytes
    # the weights (14e9) and one sequence of 512 + 32 tokens (2 x 28 x 4 x 128 x 2 B x 544 = 62 MB) over 80 GiB
    assert "`memory_fraction = 0.17`" in d.hints[0]
    assert text.splitlines()[d.span.line - 1][d.span.column - 1:d.span.end_column - 1] == "0.01"


def test_an_engine_whose_fraction_holds_the_weights_but_no_sequence(tmp_path):
    text = spec("pool gpus { nodes = 1  devices_per_node = 8  device = gpu  memory = 80GiB }\n"
                "role actor { model = big  pool = gpus  replicas = 8  strategy = fsdp  dtype = bf16 }\n"
                "role rollout { colocate = actor  engine = vllm  memory_fraction = 0.164  max_new_tokens = 32000  "
                "dtype = bf16 }", model=QWEN, data="batch_size = 64  max_prompt_length = 512")
    _, diagnostics = plan_text(tmp_path, text)
    d = only(diagnostics, "engine-memory")
    # 0.164 x 80 GiB = 14.09e9 leaves 0.09e9 after 14e9 of weights; a sequence of 32,512 tokens needs 3.7e9
    assert "no room for one sequence of 32,512 tokens" in d.message


def test_a_7b_policy_on_one_device_names_the_actors_training_state_first():
    plan, diagnostics = _fixture("verl_grpo_qwen2_7b_1gpu.rl")
    d = only(diagnostics, "out-of-memory")
    assert d.hints[0].startswith("`actor`'s training state alone is 16 bytes per parameter (4 fp32 weights + 4 "
                                 "grads + 8 AdamW) = 113 GiB")  # 7.6e9 x 16 = 121.6e9 bytes
    assert "more than the device's 80 GiB" in d.hints[0]
    advice = [h for h in d.hints if h.startswith("fits with")]
    assert advice and not any("tp" in h or "`replicas" in h for h in advice)
    assert all("devices_per_node" in h or "nodes" in h for h in advice)  # one device can not hold 113 GiB


def test_every_printed_fix_fits_when_applied(tmp_path):
    base = ("pool gpus { nodes = 1  devices_per_node = 8  device = gpu  memory = 80GiB }\n"
            "role actor { model = big  pool = gpus  replicas = 8  micro_batch = 64  dtype = bf16 %s }\n"
            "role rollout { colocate = actor  engine = sglang  tp = 2  dtype = bf16 }")
    plan, diagnostics = plan_text(tmp_path, spec(base % "", model=QWEN, data="batch_size = 64  max_prompt_length = 512"))
    d = only(diagnostics, "out-of-memory")
    fixes = [h for h in d.hints if h.startswith("fits with")]
    assert fixes and "`strategy = fsdp` on `actor`" in " ".join(fixes)
    # the suggestion, applied, plans without an out-of-memory
    _, again = plan_text(tmp_path, spec(base % "strategy = fsdp", model=QWEN,
                                        data="batch_size = 64  max_prompt_length = 512"), name="fixed.rl")
    assert "out-of-memory" not in codes(again)


def test_kv_advice_never_says_tp_when_tp_does_not_shrink_it(tmp_path):
    text = spec("pool gpus { nodes = 1  devices_per_node = 1  device = gpu  memory = 80GiB }\n"
                "role actor { model = big  pool = gpus  dtype = bf16  micro_batch = 1  lora { rank = 8 } }\n"
                "role rollout { colocate = actor  n = 64  max_new_tokens = 4096  dtype = bf16 }",
                model=QWEN, data="batch_size = 64  max_prompt_length = 512")
    _, diagnostics = plan_text(tmp_path, text)
    d = only(diagnostics, "out-of-memory")  # hf's cache grows to the batch's longest row: not a worst case
    assert not any("tp" in h for h in d.hints) and not any("raise `replicas`" in h for h in d.hints)
    # what does shrink it: generating the batch in chunks (each fix printed was planned again and fits)
    assert any("`max_sequences = 128` on `rollout`" in h for h in d.hints), d.hints


def test_lora_3b_on_two_devices_fits():
    _, diagnostics = _fixture("verl_grpo_qwen2_5_3b_lora.rl")
    assert "out-of-memory" not in codes(diagnostics) and "engine-memory" not in codes(diagnostics)
    assert "memory-unknown" not in codes(diagnostics)  # the MLP size follows from params, layers and hidden


def test_activations_and_logits_of_a_pass_by_hand():
    p = Pass(rows=4, length=1024, scored=512)  # 4 samples of 512 + 512 tokens
    h, i, kv, heads, layers, vocab = 3584, 18944, 4 * 128, 28, 28, 152064
    shape = dict(layers=layers, hidden=h, intermediate=i, vocab=vocab, dtype_bytes=2, kv=kv, heads=heads)
    full = activation_bytes(p, backward=True, **shape)
    # what one block keeps per token, bf16: 8 h + 4 i + 2 kv values, the two norms' float32 input copies (2 h
    # bytes each more than bf16), a float32 log-sum-exp per head and an inverse RMS per norm
    per_token = 2 * (8 * h + 4 * i + 2 * kv) + 2 * 2 * h + 4 * (heads + 2)
    assert per_token == 225_400
    outside = 4096 * 3 * h * 2  # the embeddings' output, the final norm's input and output
    assert full["activations"] == layers * 4096 * per_token + outside
    logits = 4 * 512 * vocab * 2  # bf16 logits of the response positions
    assert full["logits"] == 2 * logits + 512 * vocab * 4  # and their gradient, and one fp32 chunk
    ckpt = activation_bytes(p, backward=True, checkpointing=True, **shape)
    # each block's input; the block recomputed in backward (0.92 GB) fits in the room the logits (1.56 GB) free
    assert 4096 * per_token < full["logits"]
    assert ckpt["activations"] == layers * 4096 * h * 2 + outside
    assert ckpt["activations"] < full["activations"] / 10
    value_ckpt = activation_bytes(p, backward=True, checkpointing=True, value_head=True, **shape)
    assert value_ckpt["activations"] == layers * 4096 * h * 2 + outside + 4096 * per_token  # no logits to replace
    forward = activation_bytes(p, backward=False, **shape)
    assert forward["logits"] == logits + 512 * vocab * 4
    critic = activation_bytes(p, backward=True, value_head=True, **shape)
    assert "logits" not in critic


def test_backward_allocates_the_gradients_as_it_frees_the_activations():
    items = {"activations": 50, "logits": 20}
    # after an optimizer step the gradients are gone: the peak is the larger of the backward's start
    # (activations + logits + the LM head's gradients) and its end (every gradient)
    start = backward_peak(items, grads=40, head_grads=5, accumulated=False)
    assert start == {"grads": 40, "activations": 15, "logits": 20} and sum(start.values()) == 50 + 20 + 5
    end = backward_peak(items, grads=100, head_grads=5, accumulated=False)
    assert end == {"grads": 100, "activations": 0, "logits": 0} and sum(end.values()) == 100
    # tied embeddings: at the end the embeddings' dense gradient joins the head's, two more of its size at once
    tied = backward_peak({"activations": 10, "logits": 5}, grads=100, head_grads=30, accumulated=False, tied=True)
    assert tied == {"grads": 100, "tied_embedding_grads": 60, "activations": 0, "logits": 0}
    # a second micro-batch of the same step starts with the first one's gradients: the sum
    assert backward_peak(items, grads=100, head_grads=5, accumulated=True) == {"grads": 100, **items}


# ---- the rollout's `max_sequences`: the engine's scheduler limit ----------------------------------------------


def _sglang_with(*overrides: str):
    return plan_spec(compile_spec(str(FIXTURES / "verl_ppo_qwen2_7b_sglang.rl"), list(overrides)))


def test_max_sequences_below_what_the_pool_holds_bounds_the_batch_and_adds_waves():
    plan, diagnostics = _sglang_with("rollout.max_sequences=64")
    note = only(diagnostics, "engine-batch")
    # the pool still holds 150 (the fraction is reserved whatever the limit); 64 run at once: ceil(1024 / 64)
    assert "holds 150 sequences of 8,192 tokens at once" in note.message
    assert "; max_sequences = 64 runs 64 at once; its 1,024 samples a step run in 16 waves" in note.message
    assert plan.role("rollout").settings.max_sequences == 64
    generate = next(c for c in plan.calls if c.label == "rollout.generate")
    # the engine gets the role's limit once, where it is built; a generate call carries none of its own
    assert not hasattr(generate.settings, "max_sequences")
    # the memory is the fraction either way
    assert _row(plan).estimated_bytes == _row(_fixture("verl_ppo_qwen2_7b_sglang.rl")[0]).estimated_bytes


def test_max_sequences_above_what_the_pool_holds_changes_nothing():
    _, diagnostics = _sglang_with("rollout.max_sequences=1024")  # verl's max_num_seqs default
    note = only(diagnostics, "engine-batch")
    assert "max_sequences" not in note.message and "1,024 samples a step run in 7 waves" in note.message


def test_the_hf_engine_keeps_the_kv_cache_of_one_chunk(tmp_path):
    def kv_cache(extra: str) -> int:
        text = spec("pool gpus { nodes = 1  devices_per_node = 8  device = gpu  memory = 80GiB }\n"
                    "role actor { model = big  pool = gpus  replicas = 4  strategy = fsdp  dtype = bf16 }\n"
                    "role rollout { model = big  pool = gpus  replicas = 4  n = 8  max_new_tokens = 1024  "
                    f"dtype = bf16 {extra} }}", model=QWEN, data="batch_size = 64  max_prompt_length = 512")
        plan, _ = plan_text(tmp_path, text)
        return _row(plan, device=4).breakdown["rollout/kv_cache"]  # rollout replica 0

    # K and V x 28 layers x 4 kv heads x 128 dims x bf16, for 512 + 1024 tokens
    per_sequence = 2 * 28 * 4 * 128 * 2 * (512 + 1024)
    assert kv_cache("") == 128 * per_sequence  # 64 prompts x 8 samples / 4 replicas, all at once
    assert kv_cache("max_sequences = 32") == 32 * per_sequence  # the replica's 128 in 4 chunks of 32
    assert kv_cache("max_sequences = 1024") == 128 * per_sequence  # a limit above the batch chunks nothing


def test_max_sequences_must_be_a_positive_integer(tmp_path):
    text = spec("pool main { nodes = 1  devices_per_node = 1 }\n"
                "role actor { model = policy  pool = main }\n"
                "role rollout { colocate = actor  max_sequences = 0 }")
    _, diagnostics = plan_text(tmp_path, text)
    d = only(diagnostics, "wrong-type")
    assert d.is_error and "`max_sequences`: expected an integer >= 1, got 0" in d.message
