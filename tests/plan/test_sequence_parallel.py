"""Ulysses sequence parallelism (`sequence_parallel = k`, verl's ulysses_sequence_parallel_size): samples split over
replicas / k groups, each device holds 1/k of every sequence's tokens; planned and checked, refused by `run`."""

from __future__ import annotations

from pathlib import Path

from rlgraph.commands.import_verl import import_verl_text
from rlgraph.compiler import compile_spec
from rlgraph.compiler.passes.runtime_support import refusal
from rlgraph.plan.build import plan_spec

from .helpers import codes, only, spec
from .test_memory import PPO_STEP, QWEN

FIXTURES = Path(__file__).resolve().parents[1] / "importers" / "fixtures"


def _spec(actor: str = "", ref: str = "", minibatch: int = 16, prompt: int = 1024) -> str:
    body = ("pool gpus { nodes = 1  devices_per_node = 8  device = gpu  memory = 141GiB }\n"
            f"role actor {{ model = big  pool = gpus  replicas = 8  strategy = fsdp  dtype = bf16  {actor} }}\n"
            "role rollout { colocate = actor  n = 8  max_new_tokens = 1024  engine = vllm  dtype = bf16  memory_fraction = 0.1 }\n"
            f"role ref {{ model = big  colocate = actor  dtype = bf16  micro_batch = 4  {ref} }}")
    step = PPO_STEP.replace("actor.update", f"actor.update(minibatch = {minibatch})")
    return spec(body, step=step, model=QWEN, data=f"batch_size = 32  max_prompt_length = {prompt}")


def _compile(tmp_path, text):
    path = tmp_path / "spec.rl"
    path.write_text(text)
    return compile_spec(str(path))


def _update(tmp_path, text) -> dict[str, int]:
    """The actor update's activations and logits on device 0."""
    plan, _ = plan_spec(_compile(tmp_path, text))
    row = next(m for m in plan.memory if m.device == 0)
    return {k: v for k, v in row.breakdown.items() if k in ("actor/activations", "actor/logits")}


def test_micro_batch_counts_samples_per_group_as_verls_per_gpu_share(tmp_path):
    # 16 prompts x n=8 = 128 samples a mini-batch: 16 a device over 8 replicas, 32 a group over 4 groups of 2
    result = _compile(tmp_path, _spec("micro_batch = 32  sequence_parallel = 2", ref="sequence_parallel = 2"))
    assert "batch-divisibility" not in codes(result.diagnostics)
    result = _compile(tmp_path, _spec("micro_batch = 32"))
    assert only(result.diagnostics, "batch-divisibility").message.startswith(
        "micro_batch = 32 samples is more than the 16 samples each replica of `actor` gets per mini-batch")
    result = _compile(tmp_path, _spec("micro_batch = 64  sequence_parallel = 2"))
    assert only(result.diagnostics, "batch-divisibility").message.startswith(
        "micro_batch = 64 samples is more than the 32 samples each group of 2 replicas of `actor` (sequence_parallel)")


def test_a_token_budget_holds_k_times_its_tokens_per_group(tmp_path):
    # rows of 1024 + 1024 tokens: a budget of 1024 a device holds one row over 2 devices, none on one
    assert "token-budget" not in codes(_compile(tmp_path, _spec(
        "micro_batch_tokens = 1024  sequence_parallel = 2", ref="sequence_parallel = 2")).diagnostics)
    assert "token-budget" in codes(_compile(tmp_path, _spec("micro_batch_tokens = 1024")).diagnostics)


def test_each_device_holds_its_slice_of_the_activations_and_logits(tmp_path):
    split = _update(tmp_path, _spec("micro_batch = 8  sequence_parallel = 2", ref="sequence_parallel = 2"))
    whole = _update(tmp_path, _spec("micro_batch = 8"))
    same_tokens = _update(tmp_path, _spec("micro_batch = 4"))
    assert split == same_tokens  # 8 rows over 2 devices: the tokens of 4 rows on each
    assert all(split[k] < whole[k] for k in whole)


def test_a_size_that_does_not_divide_the_replicas_is_an_error(tmp_path):
    d = only(_compile(tmp_path, _spec("sequence_parallel = 3")).diagnostics, "batch-divisibility")
    assert d.message == "sequence_parallel = 3 does not divide the 8 replicas of `actor`"
    assert "use 2 or 4" in d.hints[0]


def test_run_refuses_it_clearly(tmp_path):
    result = _compile(tmp_path, _spec("micro_batch = 8  sequence_parallel = 2"))
    d = only(result.diagnostics, "sequence-parallel-not-implemented")
    assert "`rlgraph run` refuses the spec" in d.hints[0]
    assert "sequence-parallel-not-implemented" in refusal(result.diagnostics)
    assert refusal(_compile(tmp_path, _spec("micro_batch = 8")).diagnostics) == ""


def test_a_verl_launch_with_ulysses_imports_its_per_rank_share(tmp_path):
    # 32 prompts x n=5 over 8 GPUs is 20 samples a GPU, but verl's share with sp = 2 is 160 / 4 = 40 a rank
    launch = (FIXTURES / "grpo_qwen2_7b.overrides").read_bytes()
    sets = ["actor_rollout_ref.actor.ppo_mini_batch_size=32", "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2"]
    text, _ = import_verl_text(launch, "run.sh", "80GiB", sets)
    assert "sequence_parallel = 2  # verl: actor.ulysses_sequence_parallel_size" in text
    ref = text[text.index("role ref"):]
    assert "sequence_parallel = 2  # verl: actor.ulysses_sequence_parallel_size (the default)" in ref[:ref.index("}")]
    found = codes(_compile(tmp_path, text).diagnostics)
    assert "batch-divisibility" not in found and "token-budget" not in found
    text, _ = import_verl_text(launch, "run.sh", "80GiB", sets[:1])  # the same launch without Ulysses
    assert "batch-divisibility" in codes(_compile(tmp_path, text).diagnostics)
