"""`rlgraph import verl`: the engines' scheduler limit (verl's rollout.max_num_seqs, which verl hands to vLLM as
max_num_seqs and to SGLang as max_running_requests) becomes the rollout's `max_sequences`."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlgraph.commands.import_verl import import_verl_text

FIXTURES = Path(__file__).parent / "fixtures"
LAUNCH = "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo actor_rollout_ref.rollout.n=4 "


def _rollout_lines(overrides: str) -> tuple[list[str], list[str]]:
    text, warnings = import_verl_text((LAUNCH + overrides + "\n").encode(), "run.sh", "80GiB")
    block = text.split("role rollout {", 1)[1].split("\n}", 1)[0]
    return [line.strip() for line in block.splitlines()], warnings


def test_a_launchs_max_num_seqs_is_the_rollouts_max_sequences():
    lines = import_verl_text((FIXTURES / "grpo_lora_qwen25_05b_1gpu.overrides").read_bytes(), "run.sh",
                             "80GiB")[0].splitlines()
    assert "  max_sequences = 512  # verl: rollout.max_num_seqs" in lines  # examples/tuning: max_num_seqs=512


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_unset_it_is_verls_default_of_256(engine):
    lines, _ = _rollout_lines(f"actor_rollout_ref.rollout.name={engine}")
    assert "max_sequences = 256  # verl: default" in lines  # verl/trainer/config/rollout/rollout.yaml


def test_sglangs_own_engine_kwargs_entry_wins():
    lines, warnings = _rollout_lines(
        "actor_rollout_ref.rollout.name=sglang actor_rollout_ref.rollout.max_num_seqs=128 "
        "+actor_rollout_ref.rollout.engine_kwargs.sglang.max_running_requests=64")
    assert ("max_sequences = 64  # verl: rollout.engine_kwargs.sglang.max_running_requests, rollout.max_num_seqs"
            in lines)
    assert not [w for w in warnings if "max_num_seqs" in w or "max_running_requests" in w]  # both read


def test_the_hf_engine_and_the_token_budget_are_not_mapped_and_say_why():
    lines, warnings = _rollout_lines("actor_rollout_ref.rollout.name=hf actor_rollout_ref.rollout.max_num_seqs=128 "
                                     "actor_rollout_ref.rollout.max_num_batched_tokens=16384")
    assert not any(line.startswith("max_sequences") for line in lines)
    assert "# verl: rollout.max_num_seqs=128 (no effect: verl's hf rollout does not read it)" in lines
    budget = next(line for line in lines if "max_num_batched_tokens" in line)
    assert "not mapped" in budget and "max_sequences" in budget
    assert [w for w in warnings if "max_num_batched_tokens=16384 is not mapped: vLLM's token budget" in w]


def test_a_bad_limit_is_one_clear_error():
    from rlgraph.importers.verl import ImportProblem

    with pytest.raises(ImportProblem, match="max_num_seqs=0: expected an integer >= 1"):
        _rollout_lines("actor_rollout_ref.rollout.max_num_seqs=0")
