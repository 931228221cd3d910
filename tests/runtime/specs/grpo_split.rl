rlgraph 1
# GRPO with the rollout on a CPU device of its own (synced over a collective
# group); tests/runtime/specs/grpo_colocated.rl is the same spec colocated.

include "../../../specs/common/arith_base.rl"

pool gen { nodes = 1  devices_per_node = 1  device = cpu }

role actor {
  model = policy
  pool = main
  optim { lr = 1e-4 }
}

role rollout {
  model = policy
  pool = gen
  engine = hf
  n = 8
  temperature = 1.0
  max_new_tokens = 4
}

role ref { model = policy  colocate = actor }

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  responses -> ref.log_prob -> ref_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages, ref_log_prob -> actor.update(clip = 0.2, epochs = 1, minibatch = 16, kl_coef = 0.001, kl_kind = low_var_kl)
}
