"""rlgraph/compiler/passes/sampling.py and what several generate calls, `filter_groups` and `overlong_penalty` change in
the other checks and in the Plan: each generate call has its own `n` and `temperature`, the batch checks count the
trained call's samples, and the filter splits the schedule into generation rounds and the rest."""

from __future__ import annotations

from rlgraph.contract.rollouts import trained_generate
from rlgraph.plan.build import build_plan

from .helpers import compile_text, found, line_of, only, spec

ROLES = """\
role actor { model = policy  pool = main }
role rollout { colocate = actor  n = 4  max_new_tokens = 8 }"""

REMAX_STEP = """\
  sync actor -> rollout
  prompts -> rollout.generate -> responses, old_log_prob
  prompts -> rollout.generate(n = 1, temperature = 0) -> greedy
  responses -> exact -> scores
  greedy -> exact -> greedy_scores
  scores, greedy_scores -> remax_advantage -> advantages
  old_log_prob, advantages -> actor.update(minibatch = 8)"""

DAPO_STEP = """\
  sync actor -> rollout
  prompts -> rollout.generate -> responses, old_log_prob
  responses -> exact -> scores
  scores -> filter_groups(max_rounds = 3)
  scores -> overlong_penalty(buffer = 2, penalty_factor = 0.5) -> rewards
  rewards -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update"""


def _plan(tmp_path, text: str):
    result = compile_text(tmp_path, text)
    assert result.ok, found(result)
    return build_plan(result)


def test_each_generate_call_samples_with_its_own_settings_and_the_trained_one_sets_the_rest(tmp_path):
    plan = _plan(tmp_path, spec(REMAX_STEP, ROLES, devices=1))
    trained, greedy = plan.call("rollout.generate"), plan.call("rollout.generate#2")
    assert trained_generate(plan.calls) is trained  # its kept log-probs feed the update
    assert (trained.settings.n, trained.settings.temperature, trained.settings.keep_log_probs) == (4, 1.0, True)
    assert (greedy.settings.n, greedy.settings.temperature, greedy.settings.keep_log_probs) == (1, 0.0, False)
    update = plan.call("actor.update").settings
    assert update.temperature == 1.0  # log-probs at the trained call's temperature, not the greedy one's
    assert update.mini_batch_size == 8 * 4  # mini-batches of the trained call's samples


def test_the_trained_rollout_is_the_one_role_calls_read_wherever_it_is_written(tmp_path):
    step = REMAX_STEP.splitlines()
    step[1], step[2] = step[2], step[1]  # the greedy call written first
    plan = _plan(tmp_path, spec("\n".join(step), ROLES, devices=1))
    assert trained_generate(plan.calls).id == "rollout.generate#2"
    assert trained_generate(plan.calls).settings.n == 4


def test_the_batch_checks_count_the_trained_calls_samples(tmp_path):
    # 32 prompts x n = 3 = 96 samples, over 2 replicas: fine; a mini-batch of 5 prompts x 3 = 15 samples is not
    roles = "role actor { model = policy  pool = main  replicas = 2 }\nrole rollout { colocate = actor  n = 4 }"
    step = REMAX_STEP.replace("rollout.generate -> responses", "rollout.generate(n = 3) -> responses") \
                     .replace("minibatch = 8", "minibatch = 16")
    assert found(compile_text(tmp_path, spec(step, roles, devices=2))) == []
    text = spec(step.replace("minibatch = 16", "minibatch = 1"), roles, devices=2)
    d = only(compile_text(tmp_path, text), "batch-divisibility")
    assert d.message == "a mini-batch of 1 prompts × n=3 = 3 samples does not split evenly over the 2 data-parallel " \
                        "replicas of `actor`"


def test_a_group_estimator_over_a_call_that_draws_one_sample_points_at_its_n(tmp_path):
    step = DAPO_STEP.replace("rollout.generate -> responses", "rollout.generate(n = 1) -> responses")
    text = spec(step, ROLES, devices=1)
    found = [d for d in compile_text(tmp_path, text).diagnostics if d.code in ("algorithm", "single-sample-group")]
    # grpo_advantage and filter_groups both compare the samples of a prompt: the filter would drop every prompt
    # (an error), the estimator trains on raw scores (a warning)
    assert {(d.code, d.message.split("`")[1]) for d in found} == {("single-sample-group", "grpo_advantage"),
                                                                 ("algorithm", "filter_groups")}
    errors = found
    assert all(d.span.line == line_of(text, "generate(n = 1)") for d in errors)
    assert all("`rollout.generate` draws only 1 sample per prompt" in d.message for d in errors)


def test_a_greedy_trained_call_under_a_group_estimator_warns_at_its_temperature(tmp_path):
    step = DAPO_STEP.replace("rollout.generate -> responses", "rollout.generate(temperature = 0) -> responses")
    text = spec(step, ROLES, devices=1)
    d = [d for d in compile_text(tmp_path, text).diagnostics if d.code == "greedy-group"][0]
    assert d.span.line == line_of(text, "temperature = 0")


def test_the_filter_splits_the_schedule_into_a_generation_round_and_the_rest(tmp_path):
    plan = _plan(tmp_path, spec(DAPO_STEP, ROLES, devices=1))
    stages = [s.calls for s in plan.schedule]
    assert stages == [["rollout.generate"], ["exact"], ["filter_groups"], ["overlong_penalty"], ["grpo_advantage"],
                      ["actor.update"]]
    assert plan.call("filter_groups").settings.max_rounds == 3
    shaping = plan.call("overlong_penalty").settings
    assert (shaping.buffer, shaping.penalty_factor, shaping.max_new_tokens) == (2, 0.5, 8)


def test_dynamic_sampling_is_synchronous(tmp_path):
    roles = "role actor { model = policy  pool = main }\nrole rollout { model = policy  pool = gen  n = 4 }"
    text = spec(DAPO_STEP, roles, devices=1,
                extra="pool gen { nodes = 1  devices_per_node = 1 }\ntrain { staleness = 1 }")
    d = only(compile_text(tmp_path, text), "dynamic-sampling")
    assert d.severity == "error" and d.span.line == line_of(text, "filter_groups")
    assert "train.staleness = 1" in d.message
    assert d.hints == ("set `train.staleness = 0` (dynamic sampling trains synchronously here), or drop "
                       "`filter_groups`",)


def test_several_generate_calls_may_run_asynchronously(tmp_path):
    # every generate call of a step needs only its prompts: the driver launches them all ahead
    roles = "role actor { model = policy  pool = main }\nrole rollout { model = policy  pool = gen  n = 4 }"
    text = spec(REMAX_STEP, roles, devices=1,
                extra="pool gen { nodes = 1  devices_per_node = 1 }\ntrain { staleness = 1 }")
    assert found(compile_text(tmp_path, text)) == []


def test_overlong_penalty_needs_its_buffer(tmp_path):
    text = spec(DAPO_STEP.replace("buffer = 2, ", ""), ROLES, devices=1)
    d = only(compile_text(tmp_path, text), "missing-key")
    assert d.message == "`overlong_penalty` needs the argument `buffer`"
    assert d.span.line == line_of(text, "overlong_penalty")
