"""Values that `check` accepts do not crash a worker: the spec's bounds are what the runtime can take
(issue 29 item 10: `train.seed=99999999999999999999` passed check and crashed a worker in manual_seed)."""

from __future__ import annotations

import torch

from .helpers import SPECS, plan_from_spec
from rlgraph.compiler import compile_spec
from rlgraph.plan.build import plan_spec
from rlgraph.runtime.roles import worker_specs

MAX_SEED = 2**63 - 1


def error_diagnostics(spec: str, *overrides: str) -> list:
    """The errors `check` reports: the compiler's and the plan's."""
    compilation = compile_spec(str(SPECS / spec), overrides=list(overrides))
    diagnostics = plan_spec(compilation)[1]  # the compiler's, then the plan's
    return [d for d in diagnostics if d.severity == "error"]


def errors(spec: str, *overrides: str) -> list[str]:
    return [f"{d.code}: {d.message}" for d in error_diagnostics(spec, *overrides)]


def test_a_seed_beyond_what_torch_takes_is_refused_by_check():
    assert errors("grpo_arith.rl", "train.seed=99999999999999999999") == [
        f"wrong-type: wrong value for `seed`: expected an integer <= {MAX_SEED}, got 99999999999999999999"]


def test_every_seed_check_accepts_seeds_every_worker_generator():
    plan = plan_from_spec(SPECS / "ppo_arith.rl", f"train.seed={MAX_SEED}")
    specs = [spec for spec in worker_specs(plan, {role.name: "unused" for role in plan.roles}).values()
]
    assert specs
    for spec in specs:  # a policy seeds its shuffle generator with its seed, its sampling one with seed + 1
        torch.Generator().manual_seed(spec.seed)
        torch.Generator().manual_seed(spec.seed + 1)


def test_max_new_tokens_beyond_the_models_context_is_refused_at_the_value():
    (diagnostic,) = error_diagnostics("grpo_arith.rl", "rollout.max_new_tokens=1000000000")
    assert diagnostic.code == "context-length"
    assert "at most 64 positions" in diagnostic.message and "at most 63" in diagnostic.hints[0]
    assert (diagnostic.span.file, diagnostic.span.column) == ("<override 1>", 24)


def test_max_new_tokens_within_the_context_checks():
    assert errors("grpo_arith.rl", "rollout.max_new_tokens=63") == []
    assert errors("grpo_arith.rl", "rollout.max_new_tokens=64") != []
