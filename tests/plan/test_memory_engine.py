"""Engines as they allocate memory, calls that run one at a time, activations and logits, and advice that fits
(docs/memory.md): hand computations, and verl's own launches written as specs (tests/plan/specs/verl_*.rl)."""

from __future__ import annotations

from rlgraph.compiler import compile_spec
from rlgraph.plan.build import plan_spec
from rlgraph.plan.memory_activations import Pass, activation_bytes

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
                "role actor { model = big  pool = gpus  dtype = bf16  optimizer_offload = true  micro_batch = 1 }\n"
                "role rollout { colocate = actor  n = 64  max_new_tokens = 4096  dtype = bf16 }",
                model=QWEN, data="batch_size = 64  max_prompt_length = 512")
    _, diagnostics = plan_text(tmp_path, text)
    d = only(diagnostics, "out-of-memory")
    assert not any("tp" in h for h in d.hints) and not any("raise `replicas`" in h for h in d.hints)


def test_lora_3b_on_two_devices_fits():
    _, diagnostics = _fixture("verl_grpo_qwen2_5_3b_lora.rl")
    assert "out-of-memory" not in codes(diagnostics) and "engine-memory" not in codes(diagnostics)
    assert "memory-unknown" not in codes(diagnostics)  # the MLP size follows from params, layers and hidden


def test_activations_and_logits_of_a_pass_by_hand():
    p = Pass(rows=4, length=1024, scored=512)  # 4 samples of 512 + 512 tokens
    h, i, layers, vocab = 3584, 18944, 28, 152064
    full = activation_bytes(p, layers=layers, hidden=h, intermediate=i, vocab=vocab, dtype_bytes=2, backward=True)
    block = 4096 * (14 * h + 5 * i) * 2  # what one block keeps, bf16
    assert full["activations"] == layers * block
    logits = 4 * 512 * vocab * 2  # bf16 logits of the response positions
    assert full["logits"] == 2 * logits + 512 * vocab * 4  # and their gradient, and one fp32 chunk
    ckpt = activation_bytes(p, layers=layers, hidden=h, intermediate=i, vocab=vocab, dtype_bytes=2, backward=True,
                            checkpointing=True)
    assert ckpt["activations"] == layers * 4096 * h * 2 + block  # block inputs, one block recomputed
    assert ckpt["activations"] < full["activations"] / 10
    forward = activation_bytes(p, layers=layers, hidden=h, intermediate=i, vocab=vocab, dtype_bytes=2, backward=False)
    assert forward["logits"] == logits + 512 * vocab * 4
    critic = activation_bytes(p, layers=layers, hidden=h, intermediate=i, vocab=vocab, dtype_bytes=2, backward=True,
                              value_head=True)
    assert "logits" not in critic
