"""Transforms and losses declared in the spec at run time: imported and held to their declaration before Ray
starts (pre-flight), run where the built-ins run, and a run with them trains as the built-ins do."""

from __future__ import annotations

import pytest
import torch

from rlgraph.algos import grpo_advantage
from rlgraph.runtime.errors import PreflightError, RunError
from rlgraph.runtime.preflight import preflight
from rlgraph.runtime.transforms import DriverCalls
from rlgraph.workers.batch import Rollout

from tests.tolerances import FP32_REORDERED

from .helpers import REPO, SPECS, fast, plan_from_spec, read_metrics

USER_SPEC = REPO / "tests" / "runtime" / "specs" / "grpo_user.rl"

FUNCTIONS = '''
import torch

def per_row(scores, *, epsilon):
    return scores.sum(-1)

def loss_without_agg(old_log_prob, log_prob, advantages, response_mask, *, clip_low, clip_high):
    return (log_prob * 0).sum(), {}
'''


def user_spec(tmp_path, transform: str, loss: str = "", update: str = "") -> str:
    """specs/grpo_arith.rl whose estimator is the declared transform `mine`, in a folder with functions.py."""
    (tmp_path / "functions.py").write_text(FUNCTIONS)
    text = (f'rlgraph 1\ninclude "{SPECS / "grpo_arith.rl"}"\n'
            f"transform mine {{ {transform} }}\n{loss}\nstep {{\n"
            "  sync actor -> rollout\n  prompts -> rollout.generate -> responses, old_log_prob\n"
            "  responses -> exact -> scores\n  scores -> mine -> advantages\n"
            f"  old_log_prob, advantages -> actor.update({update})\n}}\n")
    (tmp_path / "spec.rl").write_text(text)
    return str(tmp_path / "spec.rl")


def refused(spec: str) -> str:
    with pytest.raises(PreflightError) as err:
        preflight(plan_from_spec(spec), starting_locally=False)
    return str(err.value)


def test_the_compiler_reserves_the_names_the_runtime_passes():
    from rlgraph.compiler import builtins
    from rlgraph.workers import user_functions as runtime

    assert builtins.TRANSFORM_CONTEXT == runtime.TRANSFORM_CONTEXT
    assert set(builtins.LOSS_ARGUMENTS) == {*runtime.LOSS_POSITIONAL, *runtime.LOSS_KEYWORDS, "clip_c",
                                            "rollout_is_weights"}


# --- pre-flight ---


def test_a_missing_function_is_refused_naming_the_declaration(tmp_path):
    spec = user_spec(tmp_path, 'fn = "functions.py:nope"  inputs = [scores]  outputs = [advantages]')
    assert refused(spec) == (f"transform `mine` ({spec}:3, fn = 'functions.py:nope'): transform function "
                             "'functions.py:nope': file 'functions.py' has no attribute 'nope'")


def test_a_missing_module_is_refused_saying_where_it_was_looked_for(tmp_path):
    spec = user_spec(tmp_path, 'fn = "no_such_module:f"  inputs = [scores]  outputs = [advantages]')
    message = refused(spec)
    assert message.startswith(f"transform `mine` ({spec}:3, fn = 'no_such_module:f'): transform function")
    assert f"the spec's folder ({tmp_path})" in message


def test_a_function_that_cannot_take_the_declared_inputs_and_args_is_refused(tmp_path):
    spec = user_spec(tmp_path, 'fn = "functions.py:per_row"  inputs = [rewards]  outputs = [advantages]  '
                               'args { epsilon = 1e-6 }')
    message = refused(spec)  # the call passes `scores` as the declared input `rewards`, which per_row lacks
    assert message.startswith(f"transform `mine` ({spec}:3, fn = 'functions.py:per_row'): the function "
                              "per_row(scores, *, epsilon)")
    assert "cannot be called as the spec declares it, fn(rewards=<tensor>, epsilon=1e-06)" in message
    assert "Give it a parameter for each declared input (rewards) and argument (epsilon)" in message


def test_a_loss_that_cannot_take_the_update_s_arguments_is_refused(tmp_path):
    spec = user_spec(tmp_path, 'fn = "rlgraph.algos:grpo_advantage"  inputs = [token_level_rewards]  '
                               'outputs = [advantages]', loss='loss short { fn = "functions:loss_without_agg" }',
                     update="policy_loss = short")
    message = refused(spec)
    assert message.startswith(f"loss `short` ({spec}:4, fn = 'functions:loss_without_agg'): the function "
                              "loss_without_agg(old_log_prob, log_prob, advantages, response_mask, *, clip_low, "
                              "clip_high)")
    assert "got an unexpected keyword argument 'agg'" in message
    assert "Write it as `def fn(old_log_prob, log_prob, advantages, response_mask, *, clip_low, clip_high, agg)`" \
        in message


# --- on the driver ---


def _groups() -> Rollout:
    """2 prompts x 4 responses of up to 3 tokens."""
    torch.manual_seed(0)
    responses = torch.randint(1, 9, (8, 3))
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]] * 2)
    lists = {k: ["x"] * 8 for k in ("data_source", "prompt_text", "response_text")}
    return Rollout.build(torch.ones(8, 2, dtype=torch.long), torch.ones(8, 2, dtype=torch.long), responses, mask, 0,
                         uid=[0, 0, 0, 0, 1, 1, 1, 1], ground_truth=["1"] * 8, extra_info=[{}] * 8, **lists)


def test_a_user_grpo_gives_the_built_in_advantages():
    plan = plan_from_spec(USER_SPEC)
    rollout = _groups()
    scores = torch.zeros(8, 3)
    scores[torch.arange(8), rollout.reward_index] = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    out, _ = DriverCalls(plan, {}).run(plan.call("my_grpo"), {"scores": scores}, rollout)
    expected, _ = grpo_advantage(scores, rollout.loss_mask, rollout.uid, epsilon=1e-6)
    assert out["advantages"].dtype == torch.float32
    assert torch.allclose(out["advantages"], expected.float(), **FP32_REORDERED)
    assert out["advantages"].abs().sum() > 0


def test_an_output_of_the_wrong_shape_names_the_transform_and_its_line(tmp_path):
    spec = user_spec(tmp_path, 'fn = "functions.py:per_row"  inputs = [scores]  outputs = [advantages]  '
                               'args { epsilon = 0.1 }')
    plan = plan_from_spec(spec)
    with pytest.raises(RunError) as err:
        DriverCalls(plan, {}).run(plan.call("mine"), {"scores": torch.zeros(8, 3)}, _groups(), "step 3")
    assert str(err.value).startswith(f"transform `mine` ({spec}:3, fn = 'functions.py:per_row') returned "
                                     "`advantages` as shape (8,) in step 3; an output is a tensor of shape (batch, "
                                     "response_len) = (8, 3)")


# --- a whole run ---


def test_a_run_with_a_user_estimator_and_loss_trains_as_the_built_ins_do(run_cli, tmp_path):
    """tests/runtime/specs/grpo_user.rl is specs/grpo_arith.rl with GRPO's advantage computed by user code
    (independently) and the policy loss handed over by user code: both runs make the same steps."""
    runs = {}
    for name, spec in (("builtin", SPECS / "grpo_arith.rl"), ("user", USER_SPEC)):
        code, out = run_cli(spec, "--output", tmp_path / name, *fast(steps=2))
        assert code == 0, out
        runs[name] = [row for row in read_metrics(tmp_path / name) if "actor/pg_loss" in row]
    assert len(runs["user"]) == len(runs["builtin"]) == 2
    for builtin, user in zip(runs["builtin"], runs["user"]):
        for key in ("critic/advantages/mean", "critic/advantages/max", "critic/advantages/min", "actor/pg_loss",
                    "actor/grad_norm"):
            assert user[key] == pytest.approx(builtin[key], rel=1e-4, abs=1e-6), key
        assert user["actor/user_loss_scale"] == 1.0  # the user loss's own metric
