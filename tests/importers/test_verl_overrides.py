"""`rlgraph plan --fit` on a spec `rlgraph import verl` wrote also says its change as verl overrides
(rlgraph/importers/verl_overrides.py): each override, imported back, gives the rlgraph value it stands for, and
the overrides --fit prints make the launch itself fit."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlgraph.cli import main
from rlgraph.commands.import_verl import import_verl_text
from rlgraph.compiler import compile_spec
from rlgraph.importers import verl_overrides
from rlgraph.importers.verl_overrides import verl_change
from rlgraph.plan.build import plan_spec

FIXTURES = Path(__file__).parent / "fixtures"
RM_POOL = ["reward_model.enable_resource_pool=True", "reward_model.nnodes=1", "reward_model.n_gpus_per_node=2"]

# launch, overrides it starts from, (role kind | "pool NAME"), key, a value other than the launch's own
CASES = [
    ("grpo_qwen2_7b", [], "actor", "micro_batch", 8),
    ("grpo_qwen2_7b", [], "actor", "micro_batch_tokens", 12288),
    ("grpo_qwen2_7b", [], "actor", "gradient_checkpointing", False),
    ("grpo_qwen2_7b", [], "actor", "optimizer_offload", True),
    ("grpo_qwen2_7b", [], "actor", "param_offload", True),
    ("grpo_qwen2_7b", [], "ref", "micro_batch", 8),
    ("grpo_qwen2_7b", [], "ref", "micro_batch_tokens", 12288),
    ("grpo_qwen2_7b", [], "ref", "param_offload", False),
    ("grpo_qwen2_7b", [], "rollout", "memory_fraction", 0.4),
    ("ppo_deepseek7b_critic", [], "critic", "micro_batch", 4),
    ("ppo_deepseek7b_critic", [], "critic", "micro_batch_tokens", 12288),
    ("ppo_deepseek7b_critic", [], "critic", "gradient_checkpointing", False),
    ("ppo_deepseek7b_critic", [], "critic", "optimizer_offload", True),
    ("ppo_deepseek7b_critic", [], "critic", "param_offload", True),
    ("ppo_qwen2_7b_reward_model", [], "reward_model", "micro_batch", 4),
    ("ppo_qwen2_7b_reward_model", [], "reward_model", "micro_batch_tokens", 12288),
    ("grpo_qwen2_7b", [], "pool gpus", "devices_per_node", 4),
    ("grpo_qwen2_7b", [], "pool gpus", "nodes", 2),
    ("ppo_qwen2_7b_reward_model", RM_POOL, "pool reward_gpus", "devices_per_node", 4),
    ("ppo_qwen2_7b_reward_model", RM_POOL, "pool reward_gpus", "nodes", 2),
]


def _import(tmp_path: Path, launch: str, overrides: list[str], name: str = "imported.rl"):
    text, _ = import_verl_text((FIXTURES / f"{launch}.overrides").read_bytes(), f"{launch}.sh", "80GiB", overrides)
    path = tmp_path / name
    path.write_text(text)
    return path, compile_spec(str(path)).program


def test_every_key_of_the_table_is_imported_back_here():
    role_keys = {(kind, key) for _, _, kind, key, _ in CASES if not kind.startswith("pool ")}
    pool_keys = {(kind.removeprefix("pool "), key) for _, _, kind, key, _ in CASES if kind.startswith("pool ")}
    assert role_keys == set(verl_overrides._ROLE_KEYS)
    assert pool_keys == {(pool, key) for pool, keys in verl_overrides._POOL_KEYS.items() for key in keys}


@pytest.mark.parametrize("launch, start, kind, key, value", CASES,
                         ids=[f"{c[2].replace(' ', '-')}.{c[3]}" for c in CASES])
def test_an_override_imports_back_as_the_rlgraph_value_it_stands_for(tmp_path, launch, start, kind, key, value):
    _, program = _import(tmp_path, launch, start)
    if kind.startswith("pool "):
        edit, read = ("pool", kind.removeprefix("pool "), key, value), lambda p: p.pools[kind.removeprefix("pool ")]
    else:
        role = next(r for r in program.roles.values() if r.kind == kind)
        edit, read = ("role", role.name, key, value), lambda p: next(r for r in p.roles.values() if r.kind == kind)
    assert read(program).get(key) != value  # the case changes something
    change = verl_change(program, (edit,))
    assert change.unsaid == () and change.overrides
    _, again = _import(tmp_path, launch, start + list(change.overrides), "again.rl")
    assert read(again).get(key) == value


def test_fit_on_an_imported_launch_prints_overrides_that_make_the_launch_fit(tmp_path, capsys):
    one_gpu = ["trainer.n_gpus_per_node=1", "actor_rollout_ref.rollout.tensor_model_parallel_size=1"]
    path, program = _import(tmp_path, "grpo_qwen2_7b", one_gpu)
    _, diagnostics = plan_spec(compile_spec(str(path)))
    assert "out-of-memory" in {d.code for d in diagnostics}
    assert main(["plan", str(path), "--fit"]) == 0
    err = capsys.readouterr().err
    said = err.split("the same change to the verl launch, as overrides:\n", 1)[1].splitlines()
    overrides = [line.strip() for line in said if line.startswith("  ") and "=" in line]
    assert overrides and all(not o.startswith("(") for o in overrides)
    fitted, _ = _import(tmp_path, "grpo_qwen2_7b", one_gpu + overrides, "fitted.rl")
    _, diagnostics = plan_spec(compile_spec(str(fitted)))
    assert not {"out-of-memory", "memory-at-full-length"} & {d.code for d in diagnostics}


def test_fit_on_a_spec_written_by_hand_prints_no_verl_overrides(capsys):
    spec = Path(__file__).parents[1] / "plan" / "specs" / "verl_grpo_qwen2_7b_1gpu.rl"
    main(["plan", str(spec), "--fit"])
    assert "verl launch" not in capsys.readouterr().err
