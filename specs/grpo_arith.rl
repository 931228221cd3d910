rlgraph 1
# GRPO on two-digit addition: no critic. Each prompt gets a group of n = 8
# responses, and a response's advantage is its reward normalised within its
# group. The KL to the reference policy is a term of the actor's loss (verl's
# use_kl_loss), not a penalty on the reward. The rollout generates with the
# actor's own weights (colocated), so the log-probs of the samples are kept from
# generation as old_log_prob instead of recomputed by a second forward pass.

include "common/arith_base.rl"

role actor {
  model = policy
  pool = main
  optim { lr = 1e-4 }
}

role rollout { colocate = actor  engine = hf  n = 8  temperature = 1.0  max_new_tokens = 4 }

role ref { model = policy  colocate = actor }

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses, old_log_prob
  responses -> exact -> scores
  responses -> ref.log_prob -> ref_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages, ref_log_prob -> actor.update(clip = 0.2, epochs = 1, minibatch = 16, kl_coef = 0.001, kl_kind = low_var_kl)
}
