rlgraph 1
# DAPO on two-digit addition (Yu et al. 2025; verl: recipe/dapo): GRPO with
# - dynamic sampling: a prompt whose 8 samples all got the same score has a zero
#   advantage and teaches nothing, so `filter_groups` drops it, and the step draws
#   and generates more prompts until it holds data.batch_size of them (at most
#   max_rounds generation rounds per step);
# - overlong shaping: a response longer than max_new_tokens - buffer loses up to
#   penalty_factor of its reward, linearly in its length (the filter reads the
#   unshaped scores, as verl's filter_groups.metric = acc does);
# - clip-higher (clip_high = 0.28 > clip_low = 0.2) and the token-mean loss;
# - no KL term.

include "common/arith_base.rl"

role actor {
  model = policy
  pool = main
  optim { lr = 1e-4 }
}

role rollout { colocate = actor  engine = hf  n = 8  temperature = 1.0  max_new_tokens = 6 }

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses, old_log_prob
  responses -> exact -> scores
  scores -> filter_groups(max_rounds = 10)
  scores -> overlong_penalty(buffer = 2, penalty_factor = 1.0) -> rewards
  rewards -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update(clip_low = 0.2, clip_high = 0.28, loss_agg = token-mean, epochs = 1, minibatch = 16)
}
