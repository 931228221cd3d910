rlgraph 1
# GRPO on two-digit addition with the rollout on a device of its own, and
# truncated importance sampling (TIS) between the rollout and the trainer. The
# rollout generates from a copy of the actor's weights (synced each step) and
# keeps each sampled token's log-prob (rollout_log_prob); the actor recomputes
# old_log_prob itself. actor.update(tis = token) scales each token's policy loss
# by min(pi_old / pi_rollout, tis_cap), correcting for whatever makes the two
# differ: numerics here, stale weights in an asynchronous run. The mismatch is
# logged as mismatch/* and training/rollout_probs_diff_*.

include "common/arith_base.rl"

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
  prompts -> rollout.generate -> responses, rollout_log_prob
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  responses -> ref.log_prob -> ref_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages, ref_log_prob -> actor.update(clip = 0.2, epochs = 1, minibatch = 16, kl_coef = 0.001, kl_kind = low_var_kl, tis = token, tis_cap = 2.0)
}
