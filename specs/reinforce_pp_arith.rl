rlgraph 1
# REINFORCE++ on two-digit addition: no critic. The KL to the reference policy
# is subtracted from the reward per token, and the discounted return is
# whitened over the whole batch to give the advantage.

include "common/arith_base.rl"

role actor {
  model = policy
  pool = main
  optim { lr = 1e-4 }
}

role rollout { colocate = actor  engine = hf  n = 4  temperature = 1.0  max_new_tokens = 4 }

role ref { model = policy  colocate = actor }

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  responses -> ref.log_prob -> ref_log_prob
  scores, old_log_prob, ref_log_prob -> kl_penalty(kind = k2, coef = 0.01) -> rewards
  rewards -> reinforce_pp_advantage(gamma = 1.0) -> advantages
  old_log_prob, advantages -> actor.update(clip = 0.2, epochs = 1, minibatch = 16)
}
