rlgraph 1
# GRPO on two-digit addition, scored by an LLM judge instead of the rule: the judge
# (builtin:arith-gpt-teacher, which adds 86.2% of the sums right, greedy) is asked each
# sample's question, and the parser scores 1 where the policy's answer is the judge's.
# The judge reads no ground truth, so its scores are as right as its model; validation
# still scores with the rule `exact`, so the number is the true accuracy. The judge has
# a pool of its own; `colocate = actor` puts it on the actor's devices instead.
# docs/your_task.md ("An LLM judge") shows the template and parser forms.

include "common/arith_base.rl"

role actor {
  model = policy
  pool = main
  optim { lr = 1e-4 }
}

role rollout { colocate = actor  engine = hf  n = 8  temperature = 1.0  max_new_tokens = 4 }

role ref { model = policy  colocate = actor }

model judge_model { path = "builtin:arith-gpt-teacher" }

pool judging { nodes = 1  devices_per_node = 1  device = cpu }

role judge {
  kind = judge
  model = judge_model
  pool = judging
  engine = hf
  template = "{{ prompt }}"
  parser = "rlgraph.tasks.arith_judge:same_answer"
  max_new_tokens = 4
  max_invalid_fraction = 0.1
}

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses, old_log_prob
  responses -> judge.score -> scores
  responses -> ref.log_prob -> ref_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages, ref_log_prob -> actor.update(clip = 0.2, epochs = 1, minibatch = 16, kl_coef = 0.001, kl_kind = low_var_kl)
}

train { steps = 10  seed = 0  validate_every = 10 }
