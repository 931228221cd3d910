"""rlgraph/compiler/passes/roles.py: trained roles updated once from the right inputs; declared roles called."""

from .helpers import ACTOR_ONLY, GRPO_STEP, PPO_ROLES, PPO_STEP, compile_text, found, line_of, only, spec

WITH_REF = ACTOR_ONLY + "\nrole ref { model = policy  colocate = actor }"
REF_STEP = GRPO_STEP.replace("  scores ->", "  responses -> ref.log_prob -> ref_log_prob\n  scores ->")


def test_an_actor_never_updated(tmp_path):
    text = spec(GRPO_STEP.replace("\n  old_log_prob, advantages -> actor.update", "")
                + "\n  old_log_prob, advantages -> kl_penalty -> kl")  # keep the fields used
    result = compile_text(tmp_path, text)
    assert ("not-updated", line_of(text, "role actor")) in found(result)
    d = only(result, "not-updated")
    assert d.message == "actor `actor` is trained, but the step never updates it"
    assert d.hints == ("add `old_log_prob, advantages -> actor.update` to the step, or declare it as a `ref` role "
                       "if it should stay frozen",)


def test_a_critic_never_updated(tmp_path):
    text = spec(PPO_STEP.replace("\n  values, returns -> critic.update", ""), PPO_ROLES)
    assert found(compile_text(tmp_path, text)) == sorted([("not-updated", line_of(text, "role critic")),
                                                          ("unused-field", line_of(text, "-> gae ->"))])


def test_an_update_the_builder_rejected_still_counts(tmp_path):
    text = spec(GRPO_STEP.replace("-> actor.update", "-> actor.update(clipp = 0.2)"))
    assert [c for c, _ in found(compile_text(tmp_path, text))] == ["unknown-key"]


def test_an_actor_updated_twice(tmp_path):
    text = spec(GRPO_STEP + "\n  old_log_prob, advantages -> actor.update(epochs = 2)")
    result = compile_text(tmp_path, text)
    assert found(result) == [("duplicate-update", line_of(text, "epochs = 2"))]
    d = only(result, "duplicate-update")
    assert d.message == "`actor` is updated more than once in one step"
    assert d.notes[0][0] == "first updated" and d.notes[0][1].line == line_of(text, "epochs = 2") - 1


def test_a_declared_role_never_called(tmp_path):
    text = spec(GRPO_STEP, WITH_REF)
    result = compile_text(tmp_path, text)
    assert found(result) == [("unused-role", line_of(text, "role ref"))]
    d = only(result, "unused-role")
    assert d.severity == "warning"
    assert d.message == "ref role `ref` is declared, but the step never calls it"
    assert d.hints == ("call it, e.g. `responses -> ref.log_prob -> ref_log_prob`, or remove it",)


def test_a_role_named_only_by_a_rejected_call_is_not_unused(tmp_path):
    text = spec(GRPO_STEP + "\n  responses -> ref.logprob -> ref_log_prob", WITH_REF)
    assert [c for c, _ in found(compile_text(tmp_path, text))] == ["unknown-call"]


def test_actor_update_old_log_prob_from_the_reference_policy(tmp_path):
    text = spec(REF_STEP.replace("old_log_prob, advantages -> actor.update",
                                 "ref_log_prob, advantages -> actor.update"), WITH_REF)
    result = compile_text(tmp_path, text)
    update = line_of(text, "-> actor.update")
    assert ("algorithm", update) in found(result)
    d = only(result, "algorithm")
    assert d.message == ("`actor.update` needs the log-probs of `actor` itself as `old_log_prob`, but `ref_log_prob` "
                         "comes from `ref.log_prob`")
    assert d.label == "from `ref.log_prob`"
    assert d.hints == ("pass the output of `responses -> actor.log_prob -> old_log_prob`, or keep them from a "
                       "rollout synced from `actor`: `generate -> responses, old_log_prob`",)


KEPT = GRPO_STEP.replace("-> rollout.generate -> responses", "-> rollout.generate -> responses, old_log_prob").replace(
    "  responses -> actor.log_prob -> old_log_prob\n", "")


def test_old_log_prob_kept_by_a_rollout_the_actor_syncs_into(tmp_path):
    """The hybrid engine samples with the actor's weights, so generation's log-probs are the actor's own."""
    assert found(compile_text(tmp_path, spec("  sync actor -> rollout\n" + KEPT))) == []


def test_old_log_prob_kept_by_a_rollout_without_the_actor_weights(tmp_path):
    text = spec(KEPT)  # no `sync actor -> rollout`: the rollout's log-probs are not the actor's
    result = compile_text(tmp_path, text)
    d = next(d for d in result.diagnostics if d.code == "algorithm" and "old_log_prob" in d.message)
    assert d.message == ("`actor.update` needs the log-probs of `actor` itself as `old_log_prob`, but `old_log_prob` "
                         "comes from `rollout.generate`")


def test_actor_update_old_log_prob_from_another_actor(tmp_path):
    roles = ACTOR_ONLY + "\nrole actor2 { kind = actor  model = policy  pool = main }"
    step = GRPO_STEP + "\n  responses -> actor2.log_prob -> lp2\n  lp2, advantages -> actor2.update(kl_coef = 0)"
    text = spec(step.replace("old_log_prob, advantages -> actor.update", "lp2, advantages -> actor.update"), roles)
    result = compile_text(tmp_path, text)
    assert ("algorithm", line_of(text, "lp2, advantages -> actor.update")) in found(result)


def test_actor_update_advantages_from_a_reward(tmp_path):
    text = spec(GRPO_STEP.replace("old_log_prob, advantages -> actor.update", "old_log_prob, scores -> actor.update"))
    result = compile_text(tmp_path, text)
    assert ("algorithm", line_of(text, "-> actor.update")) in found(result)
    assert "needs the output of an advantage estimator as `advantages`" in only(result, "algorithm").message


def test_actor_update_ref_log_prob_from_the_actor(tmp_path):
    step = GRPO_STEP.replace("old_log_prob, advantages -> actor.update",
                             "old_log_prob, advantages, old_log_prob -> actor.update(kl_coef = 0.01)")
    text = spec(step)
    result = compile_text(tmp_path, text)
    assert found(result) == [("algorithm", line_of(text, "-> actor.update"))]
    assert "needs the log-probs of a reference policy as `ref_log_prob`" in only(result, "algorithm").message


def test_critic_update_values_from_another_critic(tmp_path):
    roles = PPO_ROLES + "\nrole critic2 { kind = critic  model = policy  colocate = actor }"
    text = spec(PPO_STEP + "\n  responses -> critic2.values -> values2\n  values, returns -> critic2.update", roles)
    result = compile_text(tmp_path, text)
    assert found(result) == sorted([("algorithm", line_of(text, "-> critic2.update")),
                                    ("unused-field", line_of(text, "-> values2"))])
    assert only(result, "algorithm").hints == ("pass the output of `responses -> critic2.values -> values`",)


def test_kl_loss_needs_reference_log_probs(tmp_path):
    text = spec(REF_STEP.replace("-> actor.update", "-> actor.update(kl_coef = 0.04)"), WITH_REF)
    result = compile_text(tmp_path, text)
    assert found(result) == sorted([("algorithm", line_of(text, "kl_coef")),
                                    ("unused-field", line_of(text, "-> ref_log_prob"))])
    d = only(result, "algorithm")
    assert d.message == "`actor.update` has a KL loss (kl_coef = 0.04) but no `ref_log_prob` input"
    assert d.hints == ("pass the reference log-probs as a third input: `old_log_prob, advantages, ref_log_prob -> "
                       "actor.update(...)`, or set kl_coef = 0",)
    assert (d.span.end_column - d.span.column) == len("0.04")


def test_kl_loss_with_reference_log_probs_is_fine(tmp_path):
    text = spec(REF_STEP.replace("old_log_prob, advantages -> actor.update",
                                 "old_log_prob, advantages, ref_log_prob -> actor.update(kl_coef = 0.04)"), WITH_REF)
    assert found(compile_text(tmp_path, text)) == []


def test_reference_log_probs_without_kl_loss_are_ignored(tmp_path):
    text = spec(REF_STEP.replace("old_log_prob, advantages -> actor.update",
                                 "old_log_prob, advantages, ref_log_prob -> actor.update"), WITH_REF)
    result = compile_text(tmp_path, text)
    assert found(result) == [("ignored-input", line_of(text, "-> actor.update"))]
    d = only(result, "ignored-input")
    assert d.severity == "warning"
    assert d.message == "`actor.update` ignores `ref_log_prob`: its KL loss is off (kl_coef = 0)"
