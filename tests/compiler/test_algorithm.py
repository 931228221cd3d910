"""rlgraph/compiler/passes/algorithm.py: estimators, KL terms, weight syncs."""

import pytest

from .helpers import ACTOR_ONLY, GRPO_STEP, PPO_ROLES, PPO_STEP, compile_text, found, line_of, only, spec

SEPARATE_POOLS = """\
role actor { model = policy  pool = main  replicas = 2 }
role rollout { model = policy  pool = gen  replicas = 2  n = 4 }"""
GEN_POOL = "pool gen { nodes = 1  devices_per_node = 2 }"


def test_gae_needs_a_critic(tmp_path):
    step = GRPO_STEP.replace("scores -> grpo_advantage -> advantages",
                             "scores, old_log_prob -> gae -> advantages, returns\n  returns -> rloo_advantage -> r2")
    text = spec(step)
    result = compile_text(tmp_path, text)
    assert ("algorithm", line_of(text, "-> gae ->")) in found(result)
    gae = [d for d in result.diagnostics if d.code == "algorithm" and d.span.line == line_of(text, "-> gae ->")][0]
    assert gae.message == ("`gae` needs the values of a critic as `values`, but `old_log_prob` comes from "
                           "`actor.log_prob`")


def test_gae_with_a_critic_is_fine(tmp_path):
    assert found(compile_text(tmp_path, spec(PPO_STEP, PPO_ROLES))) == []


@pytest.mark.parametrize("estimator", ["grpo_advantage", "rloo_advantage", "reinforce_pp_baseline_advantage"])
def test_group_estimators_over_one_sample_warn_that_they_train_on_raw_scores(tmp_path, estimator):
    """A group of one keeps its raw score (verl's rule, rlgraph.algos.advantages.group_stats): the step trains,
    without a baseline. verl runs such launches (its tuning examples use n = 1), so it is not an error."""
    text = spec(GRPO_STEP.replace("grpo_advantage", estimator), ACTOR_ONLY.replace("n = 4", "n = 1"))
    result = compile_text(tmp_path, text)
    assert found(result) == [("single-sample-group", line_of(text, "role rollout"))]
    d = only(result, "single-sample-group")
    assert d.severity == "warning"
    assert d.message == (f"`{estimator}` compares the samples of each prompt, but rollout `rollout` draws only "
                         "1 sample per prompt: each advantage is its raw score, with no baseline (as verl does "
                         "with a group of one)")
    assert (d.span.column, d.span.end_column) == (line_of_col(text, "n = 1") + 4, line_of_col(text, "n = 1") + 5)
    assert d.hints == ("set n = 4 or more to compare a prompt's samples",)


def line_of_col(text: str, marker: str) -> int:
    return next(line.index(marker) for line in text.splitlines() if marker in line) + 1


def test_a_defaulted_n_points_at_the_rollout(tmp_path):
    text = spec(GRPO_STEP, ACTOR_ONLY.replace("  n = 4", ""))
    result = compile_text(tmp_path, text)
    d = only(result, "single-sample-group")
    assert d.span.line == line_of(text, "role rollout") and d.span.column == len("role ") + 1
    assert "(`n` defaults to 1): each advantage is its raw score" in d.message
    assert d.hints == ("add `n = 4` (or more) to role `rollout` to compare a prompt's samples",)


def test_two_samples_make_a_group_and_plain_reinforce_needs_none(tmp_path):
    assert found(compile_text(tmp_path, spec(GRPO_STEP, ACTOR_ONLY.replace("n = 4", "n = 2")))) == []
    text = spec(GRPO_STEP.replace("grpo_advantage", "reinforce_pp_advantage"), ACTOR_ONLY.replace("n = 4", "n = 1"))
    assert found(compile_text(tmp_path, text)) == []


def test_kl_penalty_needs_the_reference_policy(tmp_path):
    text = spec(PPO_STEP.replace("scores, old_log_prob, ref_log_prob -> kl_penalty",
                                 "scores, old_log_prob, old_log_prob -> kl_penalty"), PPO_ROLES)
    result = compile_text(tmp_path, text)
    assert found(result) == sorted([("algorithm", line_of(text, "-> kl_penalty")),
                                    ("unused-field", line_of(text, "-> ref_log_prob"))])
    assert only(result, "algorithm").message.startswith(
        "`kl_penalty` needs the log-probs of a reference policy as `ref_log_prob`")


def test_kl_penalty_without_a_ref_role_says_how_to_declare_one(tmp_path):
    step = GRPO_STEP.replace("scores -> grpo_advantage", "scores, old_log_prob, old_log_prob -> kl_penalty -> rewards"
                             "\n  rewards -> grpo_advantage")
    result = compile_text(tmp_path, spec(step))
    assert only(result, "algorithm").hints[0].startswith(
        "declare a reference policy, e.g. `role ref { model = policy  colocate = actor }`")


def test_kl_penalty_log_prob_from_the_reference_policy(tmp_path):
    text = spec(PPO_STEP.replace("scores, old_log_prob, ref_log_prob -> kl_penalty",
                                 "scores, ref_log_prob, ref_log_prob -> kl_penalty"), PPO_ROLES)
    result = compile_text(tmp_path, text)
    messages = [d.message for d in result.diagnostics if d.code == "algorithm"]
    assert any("needs the log-probs of an actor as `log_prob`" in m for m in messages)


def test_kl_penalty_on_the_rollouts_kept_log_probs_says_why_not_and_what_to_pass(tmp_path):
    """actor.update takes kept log-probs; kl_penalty does not: the hint says why (the user asked)."""
    step = (PPO_STEP.replace("prompts -> rollout.generate -> responses", "prompts -> rollout.generate -> responses, kept")
            .replace("scores, old_log_prob, ref_log_prob -> kl_penalty", "scores, kept, ref_log_prob -> kl_penalty"))
    result = compile_text(tmp_path, spec(step, PPO_ROLES))
    d = only(result, "algorithm")
    assert d.message == "`kl_penalty` needs the log-probs of an actor as `log_prob`, but `kept` comes from `rollout.generate`"
    assert d.hints[0].startswith("pass the output of `responses -> actor.log_prob -> old_log_prob`; the reference's "
                                 "log-probs come from the trainer's forward pass")
    assert "`actor.update` accepts kept log-probs" in d.hints[0] and "charge their difference to the policy" in d.hints[0]


DISTILL_STEP = """\
  prompts -> rollout.generate -> responses
  responses -> actor.log_prob -> old_log_prob
  responses -> ref.log_prob -> teacher_log_prob
  old_log_prob, teacher_log_prob -> distill_advantage -> advantages
  old_log_prob, advantages -> actor.update"""
TEACHER = "\nrole ref { model = policy  colocate = actor }"


def test_distillation_from_a_ref_role_teacher_is_fine(tmp_path):
    assert found(compile_text(tmp_path, spec(DISTILL_STEP, ACTOR_ONLY + TEACHER))) == []


def test_distillation_needs_its_teacher_from_a_ref_role_and_says_how_to_declare_one(tmp_path):
    step = DISTILL_STEP.replace("responses -> ref.log_prob -> teacher_log_prob",
                                "responses -> actor.log_prob -> teacher_log_prob")
    d = only(compile_text(tmp_path, spec(step)), "algorithm")
    assert d.message == ("`distill_advantage` needs the log-probs of a teacher (a `ref` role) as `teacher_log_prob`, "
                         "but `teacher_log_prob` comes from `actor.log_prob`")
    assert d.hints[0].startswith("declare the teacher as a frozen role, e.g. `role teacher { kind = ref  model = "
                                 "TEACHER_MODEL  colocate = actor }`")


def test_distillation_on_the_rollouts_kept_log_probs_says_why_not(tmp_path):
    step = (DISTILL_STEP.replace("prompts -> rollout.generate -> responses", "prompts -> rollout.generate -> responses, kept")
            .replace("old_log_prob, teacher_log_prob -> distill", "kept, teacher_log_prob -> distill"))
    d = only(compile_text(tmp_path, spec(step, ACTOR_ONLY + TEACHER)), "algorithm")
    assert "`kept` comes from `rollout.generate`" in d.message
    assert "the teacher's log-probs come from the trainer's forward pass" in d.hints[0]
    assert "where the student equals the teacher" in d.hints[0]


def test_one_advantage_estimator_per_step(tmp_path):
    text = spec(GRPO_STEP + "\n  scores -> rloo_advantage -> rloo_adv")
    result = compile_text(tmp_path, text)
    assert found(result) == [("algorithm", line_of(text, "rloo_advantage")),
                             ("unused-field", line_of(text, "rloo_advantage"))]
    d = only(result, "algorithm")
    assert d.message == "the step computes advantages twice, with `grpo_advantage` and `rloo_advantage`"
    assert d.notes[0][1].line == line_of(text, "grpo_advantage")


def test_sync_from_a_critic_and_to_a_ref(tmp_path):
    text = spec("  sync critic -> rollout\n  sync actor -> ref\n" + PPO_STEP, PPO_ROLES)
    result = compile_text(tmp_path, text)
    assert found(result) == [("bad-sync", line_of(text, "sync critic")), ("bad-sync", line_of(text, "sync actor"))]
    critic, ref = sorted((d for d in result.diagnostics), key=lambda d: d.span.line)
    assert critic.message == "`critic` is a critic role: only an actor's weights are synced to a rollout"
    assert critic.span.column == len("  sync ") + 1
    assert ref.message == "`ref` is a ref role: a sync goes to a rollout"


def test_sync_into_another_model(tmp_path):
    roles = SEPARATE_POOLS.replace("model = policy  pool = gen", "model = other  pool = gen")
    text = spec("  sync actor -> rollout\n" + GRPO_STEP, roles,
                extra=GEN_POOL + '\nmodel other { path = "/models/other" }')
    result = compile_text(tmp_path, text)
    assert found(result) == [("bad-sync", line_of(text, "sync actor"))]
    assert only(result, "bad-sync").message == ("`actor` trains model `policy`, but rollout `rollout` holds "
                                                "model `other`")


def test_a_rollout_on_its_own_pool_needs_a_sync(tmp_path):
    text = spec(GRPO_STEP, SEPARATE_POOLS, extra=GEN_POOL)
    result = compile_text(tmp_path, text)
    assert found(result) == [("missing-sync", line_of(text, "rollout.generate"))]
    d = only(result, "missing-sync")
    assert d.severity == "warning"
    assert d.hints[0].startswith("add `sync actor -> rollout` to the step")
    assert found(compile_text(tmp_path, spec("  sync actor -> rollout\n" + GRPO_STEP, SEPARATE_POOLS,
                                             extra=GEN_POOL))) == []


def test_a_colocated_rollout_reads_the_weights_in_place(tmp_path):
    assert found(compile_text(tmp_path, spec(GRPO_STEP))) == []  # ACTOR_ONLY: no sync, colocated
    assert found(compile_text(tmp_path, spec("  sync actor -> rollout\n" + GRPO_STEP))) == []
