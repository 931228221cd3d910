"""verl's one-step-off and fully-async mains give the rollout devices of its own (`rollout.n_gpus_per_node`,
`rollout.nnodes`) beside the trainer's: the import keeps them apart (a pool of its own for the rollout, synced
weights), and one-step-off generates a step ahead (`train.staleness = 1`)."""

from __future__ import annotations

import pytest

from rlgraph.commands.import_verl import import_verl_text
from rlgraph.compiler import compile_spec
from rlgraph.plan.build import plan_spec

# 12 training and 4 generating GPUs, as verl's one-step-off examples split one 16-GPU job
OVERRIDES = """algorithm.adv_estimator=grpo data.train_batch_size=96 data.max_prompt_length=512
data.max_response_length=1024 actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct
actor_rollout_ref.actor.ppo_mini_batch_size=24 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2
actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8 actor_rollout_ref.rollout.name=vllm
actor_rollout_ref.rollout.tensor_model_parallel_size=2 actor_rollout_ref.rollout.n=5
trainer.nnodes=1 trainer.n_gpus_per_node=12 rollout.nnodes=1 rollout.n_gpus_per_node=4""".split()


def _launch(main: str) -> bytes:
    return (f"python3 -m {main} \\\n    " + " \\\n    ".join(OVERRIDES) + "\n").encode()


def _imported(tmp_path, main: str):
    text, warnings = import_verl_text(_launch(main), "run.sh", "80GiB")
    path = tmp_path / "imported.rl"
    path.write_text(text)
    return text, warnings, compile_spec(str(path))


def test_one_step_off_keeps_the_rollouts_devices_apart_and_generates_a_step_ahead(tmp_path):
    text, warnings, compiled = _imported(tmp_path, "verl.experimental.one_step_off_policy.main_ppo")
    program = compiled.program
    assert (program.pools["gpus"].get("devices_per_node"), program.pools["rollout_gpus"].get("devices_per_node")) \
        == (12, 4)
    rollout = program.roles["rollout"]
    assert rollout.get("pool") == "rollout_gpus" and rollout.get("colocate") is None
    assert (rollout.get("tp"), rollout.get("replicas")) == (2, 2)
    assert program.train.get("staleness") == 1
    assert not [w for w in warnings if "rollout.n_gpus_per_node" in w or "rollout.nnodes" in w]
    plan, diagnostics = plan_spec(compiled)
    assert not [d for d in diagnostics if d.is_error], diagnostics
    placed = {(p.role, p.pool) for p in plan.placements}
    assert {("actor", "gpus"), ("rollout", "rollout_gpus")} <= placed
    assert not any(p.role == "rollout" and p.pool == "gpus" for p in plan.placements)


def test_fully_async_gets_the_rollouts_own_pool_and_keeps_its_staleness_a_warning(tmp_path):
    text, warnings, compiled = _imported(tmp_path, "verl.experimental.fully_async_policy.fully_async_main")
    assert compiled.program.roles["rollout"].get("pool") == "rollout_gpus"
    assert "staleness" not in text.split("\ntrain {", 1)[1]  # fully-async's staleness_threshold is not mapped


@pytest.mark.parametrize("main", ["verl.trainer.main_ppo"])
def test_the_ordinary_main_keeps_the_rollout_colocated(tmp_path, main):
    text, warnings, compiled = _imported(tmp_path, main)
    assert compiled.program.roles["rollout"].get("colocate") == "actor"
    assert "rollout_gpus" not in compiled.program.pools
