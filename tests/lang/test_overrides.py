"""rlgraph/lang/overrides.py: `-s path=value`, as checked end to end through compile_spec."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlgraph.compiler import compile_spec

ROOT = Path(__file__).resolve().parents[2]
PPO = str(ROOT / "specs" / "ppo_arith.rl")


def compiled(*overrides: str):
    return compile_spec(PPO, list(overrides))


@pytest.mark.parametrize("override, get, value", [
    ("train.steps=50", lambda p: p.train["steps"], 50),
    ("actor.optim.lr=1e-6", lambda p: p.roles["actor"]["optim"]["lr"], 1e-6),
    ("role.rollout.n=8", lambda p: p.roles["rollout"]["n"], 8),
    ("data.shuffle=false", lambda p: p.data["shuffle"], False),
    ("policy.params=7B", lambda p: p.models["policy"]["params"], 7 * 10**9),
    ("main.memory=16GiB", lambda p: p.pools["main"]["memory"], 16 * 2**30),
    ("actor.optim.betas=[0.9, 0.95]", lambda p: p.roles["actor"]["optim"]["betas"], [0.9, 0.95]),
])
def test_overrides_set_values(override, get, value):
    result = compiled(override)
    assert result.ok, [d.message for d in result.diagnostics]
    assert get(result.program) == value


def test_an_override_keeps_the_other_keys_of_its_block():
    program = compiled("actor.optim.lr=1e-6").program
    assert program.roles["actor"]["model"] == "policy" and program.roles["actor"]["pool"] == "main"


def test_the_last_override_wins():
    assert compiled("train.steps=5", "train.steps=7").program.train["steps"] == 7


@pytest.mark.parametrize("override, code, column", [
    ("train.steps=abc", "wrong-type", 13),
    ("train.steps", "bad-override", 1),
    ("train.steps=", "bad-override", 12),
    ("=5", "bad-override", 1),
    ("train..steps=5", "bad-override", 1),
    ("trian.steps=5", "bad-override", 1),
    ("train=5", "bad-override", 1),
    ("actor.optim.lr=[1e-4", "bad-override", 17),
    ("actor.colour=red", "unknown-key", 1),
])
def test_bad_overrides_point_into_the_override(override, code, column):
    result = compiled(override)
    (problem,) = [d for d in result.diagnostics if d.span.file == "<override 1>"]
    assert (problem.code, problem.span.line, problem.span.column) == (code, 1, column)
    assert result.sources["<override 1>"] == override


@pytest.mark.parametrize("override, offered", [
    ("actor.optim.learning_rate=1e-4", "lr"),        # verl and TRL spell it so
    ("actor.optim.max_grad_norm=1.0", "grad_clip"),
    ("rollout.num_generations=4", "n"),              # TRL's GRPOConfig
    ("rollout.gpu_memory_utilization=0.4", "memory_fraction"),  # vLLM's
    ("train.total_training_steps=5", "steps"),
    ("actor.optim.lrr=1e-4", "lr"),                  # a typo still gets difflib's suggestion
])
def test_a_key_written_as_verl_or_trl_name_it_is_offered_rlgraphs_name(override, offered):
    (problem,) = [d for d in compiled(override).diagnostics if d.span.file == "<override 1>"]
    assert problem.code == "unknown-key"
    assert any(f"did you mean `{offered}`?" in hint for hint in problem.hints), problem.hints
