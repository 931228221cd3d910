"""`memory.fit_test` checks each change `plan --fit` tries without compiling again: the change is resolved and
placed, and only the compiler's resource rules (batch arithmetic, param_offload's sharding) run, on the resolved
settings and the graph compiled once. Held here, for every change tried on every pool of a few specs: no other
check of the compiler finds another error with it (some warn otherwise: runtime_support's `strategy = fsdp` on one
replica), the graph's build reads no key a change sets, and the resource rules read off the resolved settings say
what they say read off the changed spec."""

from __future__ import annotations

import pytest

from rlgraph.compiler import compile_spec, run_check
from rlgraph.compiler.build import build_graph
from rlgraph.compiler.passes import PASSES
from rlgraph.compiler.passes.batch import batch, batch_rules
from rlgraph.compiler.passes.offload import offload, offload_rules
from rlgraph.plan.build import plan_spec, plan_step_shape
from rlgraph.plan.memory import fit_test
from rlgraph.plan.memory_advice import _apply, _candidates
from rlgraph.plan.placement import place
from rlgraph.plan.resolve import models_settings
from rlgraph.plan.resources import planned_resources

from .helpers import FIXTURES, REPO

CASES = [
    (FIXTURES / "verl_grpo_qwen2_7b_1gpu.rl", []),
    (FIXTURES / "verl_grpo_qwen2_5_3b_lora.rl", []),
    (FIXTURES / "verl_ppo_qwen2_7b_sglang.rl", []),
    (FIXTURES / "fit" / "micro_batch.rl", []),
    (REPO / "specs" / "ppo_qwen7b_rm_2x8.rl", ["actor_gpus.memory=24GiB", "critic.micro_batch=3"]),
    (REPO / "specs" / "grpo_arith_lora.rl", []),
]


def _found(diagnostics) -> list[tuple[str, str, bool]]:
    return sorted((d.code, d.message, d.is_error) for d in diagnostics)


@pytest.mark.parametrize("path, overrides", CASES, ids=[f"{c[0].stem}" for c in CASES])
def test_a_change_fit_tries_is_checked_by_the_resource_rules_alone(path, overrides):
    compilation = compile_spec(str(path), overrides)
    program, graph = compilation.program, compilation.graph
    plan, _ = plan_spec(compilation)
    step = plan_step_shape(compilation, plan)
    others = [check for check in PASSES if check not in (batch, offload)]

    def other_checks(p):  # the errors: a warning never rejects a change
        return _found(d for check in others for d in run_check(check, p, graph) if d.is_error)

    unchanged, built = other_checks(program), build_graph(program)
    tried = 0
    for pool in program.pools:
        for change in _candidates(program, pool, step):
            changed = _apply(program, change.edits)
            again, problems = build_graph(changed)
            assert (problems, [(c.id, c.kwargs) for c in again.calls()]) == \
                (built[1], [(c.id, c.kwargs) for c in built[0].calls()]), change.text
            assert other_checks(changed) == unchanged, change.text
            pools, roles, _, _ = place(changed)
            resources = planned_resources(program, pools, roles)
            assert _found(run_check(batch_rules, program, graph, resources)) == \
                _found(run_check(batch, changed, graph)), change.text
            assert _found(run_check(offload_rules, resources)) == _found(run_check(offload, changed, graph)), \
                change.text
            tried += 1
    assert tried


def test_a_change_that_breaks_the_batch_arithmetic_is_not_offered():
    # four devices alone would hold the 7B model, but each replica then gets 40 samples a mini-batch, which the
    # actor's micro_batch = 16 does not divide: the batch rule, read off the resolved settings, rejects it
    compilation = compile_spec(str(FIXTURES / "verl_grpo_qwen2_7b_1gpu.rl"))
    program = compilation.program
    step = plan_step_shape(compilation, plan_spec(compilation)[0])
    fits = fit_test(program, step, models_settings(program))
    four = (("pool", "gpu", "devices_per_node", 4), ("role", "actor", "replicas", 4))
    assert not fits(_apply(program, four), "gpu")
    assert fits(_apply(program, four + (("role", "actor", "micro_batch", 8),)), "gpu")
