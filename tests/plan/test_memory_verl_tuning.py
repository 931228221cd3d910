"""verl's recorded batch-size searches (its LoRA tuning scripts, H100 80GB) beside rlgraph's estimate.

verl-project/verl's examples/tuning/{70b,32b,14b}/qwen2-*_grpo-lora_*_h100_fsdp_vllm.sh (removed in 3467d90ae)
record in a comment which prompts-per-GPU ran and which ran out of memory. The settings below are theirs:
GRPO, LoRA rank 32 all-linear, gradient checkpointing, remove_padding, 512 + 1024 tokens, n = 5, one mini-batch
a step, vLLM at tp = GPUs, Ulysses sp 2, the ref offloaded (the actor's base under LoRA). verl's
ppo_micro_batch_size = the whole batch (deprecated, global, divided by world / sp): each sp group's pass holds
2 x prompts-per-GPU rows, each GPU half of each row's tokens, written as `sequence_parallel = 2` and
`micro_batch = 2 x prompts per GPU` (docs/memory.md, Ulysses). verl's fsdp_config.param_offload is left
out (it loads the params for the update: docs/memory.md, Offload).
"""

from __future__ import annotations

import pytest

from .helpers import codes, plan_text

MODELS = {  # published config.json facts
    "72b": ("72.7B", 80, 8192, 64, 8, 152064, 29568),
    "32b": ("32.8B", 64, 5120, 40, 8, 152064, 27648),
    "14b": ("14.7B", 48, 5120, 40, 8, 152064, 13824),
}
# model, GPUs, vLLM memory fraction, prompts a GPU that ran, that ran out of memory (the scripts' comments)
SEARCHES = [
    ("72b", 8, 0.4, (16, 20, 22), (23, 24, 32)),
    ("32b", 4, 0.3, (32, 40, 44), (45, 46, 48, 64)),
    ("14b", 2, 0.25, (32, 48, 56, 58), (59, 60, 64)),
]


def tuning_spec(model: str, gpus: int, fraction: float, per_gpu: int) -> str:
    params, layers, hidden, heads, kv_heads, vocab, inter = MODELS[model]
    prompts = per_gpu * gpus
    return f"""rlgraph 1
model m {{ path = "Qwen/Qwen2.5-{model.upper()}-Instruct"  params = {params}  layers = {layers}  hidden = {hidden}
  heads = {heads}  kv_heads = {kv_heads}  vocab = {vocab}  intermediate = {inter} }}
pool gpus {{ nodes = 1  devices_per_node = {gpus}  device = gpu  memory = 79.6GiB }}
role actor {{ model = m  pool = gpus  replicas = {gpus}  strategy = fsdp  dtype = bf16  micro_batch = {2 * per_gpu}
  sequence_parallel = 2  gradient_checkpointing = true  remove_padding = true  optimizer_offload = true  lora {{ rank = 32  alpha = 32 }} }}
role rollout {{ colocate = actor  engine = vllm  tp = {gpus}  n = 5  memory_fraction = {fraction}
  max_new_tokens = 1024  max_sequences = 512  dtype = bf16 }}
role ref {{ model = m  colocate = actor  dtype = bf16  micro_batch = {2 * per_gpu}  sequence_parallel = 2
  param_offload = true }}
reward exact {{ fn = "rlgraph.tasks.arith:exact_match" }}
data {{ train = "builtin:arith/train"  batch_size = {prompts}  max_prompt_length = 512 }}
step {{
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  responses -> ref.log_prob -> ref_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages, ref_log_prob -> actor.update(minibatch = {prompts}, kl_coef = 0.001, kl_kind = low_var_kl)
}}
"""


def verdict(tmp_path, model: str, gpus: int, fraction: float, per_gpu: int):
    plan, diagnostics = plan_text(tmp_path, tuning_spec(model, gpus, fraction, per_gpu), name=f"{model}_{per_gpu}.rl")
    row = plan.memory[0]
    memory = [d for d in diagnostics if d.code in ("out-of-memory", "memory-at-full-length", "memory-within-error")]
    return row, memory, diagnostics


@pytest.mark.parametrize("model, gpus, fraction, ran, failed", SEARCHES, ids=[s[0] for s in SEARCHES])
def test_what_verl_ran_passes_and_the_largest_it_could_not_fails_on_the_update(tmp_path, model, gpus, fraction, ran,
                                                                                failed):
    largest_ran = None
    for per_gpu in ran:
        row, memory, diagnostics = verdict(tmp_path, model, gpus, fraction, per_gpu)
        assert not [d for d in diagnostics if d.is_error], (per_gpu, diagnostics)
        largest_ran = row
    for per_gpu in failed:
        row, memory, diagnostics = verdict(tmp_path, model, gpus, fraction, per_gpu)
        assert row.estimated_bytes > row.capacity_bytes
        assert row.breakdown["actor/activations"] > largest_ran.breakdown["actor/activations"]
        if per_gpu != max(failed):  # near verl's boundary: over at full length, said, never a silent pass
            assert [d.code for d in memory] == ["memory-at-full-length"], (model, per_gpu, diagnostics)
            continue
        # the largest verl recorded as out of memory: an error, the update's working memory named as the cause
        assert [d.code for d in memory] == ["out-of-memory"], (model, per_gpu, diagnostics)
        assert "under 50% of it" in memory[0].message
        assert "while `actor.update` runs" in " ".join(memory[0].hints)
        assert "with activations" in memory[0].hints[0]
        assert any(hint.startswith("fits with") for hint in memory[0].hints)  # a fix verified by the estimate


def test_a_launch_that_fits_by_less_than_the_estimates_error_is_a_warning_not_a_pass(tmp_path):
    row, memory, _ = verdict(tmp_path, "72b", 8, 0.4, 16)  # 76.3 of 79.6 GiB; 41 GiB of it activations, logits
    assert row.estimated_bytes < row.capacity_bytes
    assert [d.code for d in memory] == ["memory-within-error"]
    assert "within the estimate's error: may not fit" in memory[0].message
    working = row.breakdown["actor/activations"] + row.breakdown["actor/logits"]
    assert row.estimated_bytes + 0.16 * working > row.capacity_bytes
    row, memory, diagnostics = verdict(tmp_path, "14b", 2, 0.25, 32)  # 70.9 GiB: room for the error
    assert memory == [] and not [d for d in diagnostics if d.is_error]


def table() -> str:
    """The calibration table of docs/memory.md: `.venv/bin/python -m tests.plan.test_memory_verl_tuning`."""
    import re
    import tempfile
    from pathlib import Path

    lines = ["| launch | prompts/GPU | verl | rlgraph at full length (GiB) | verdict |", "|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as folder:
        for model, gpus, fraction, ran, failed in SEARCHES:
            for per_gpu in sorted(ran + failed):
                row, memory, _ = verdict(Path(folder), model, gpus, fraction, per_gpu)
                said = "passes"
                if memory:
                    longest = re.search(r"longest row is up to ([\d,]+)", memory[0].message)
                    said = (f"{'error' if memory[0].is_error else 'warning'}[{memory[0].code}]"
                            + (f": rows up to {longest.group(1)} tokens fit" if longest else ""))
                lines.append(f"| Qwen2.5-{model.upper()} LoRA, {gpus} x H100 | {per_gpu} | "
                             f"{'ran' if per_gpu in ran else 'out of memory'} | {row.estimated_bytes / 2**30:.1f} | "
                             f"{said} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
