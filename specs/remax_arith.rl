rlgraph 1
# ReMax on two-digit addition (Li et al. 2024; verl: algorithm.adv_estimator =
# remax): REINFORCE whose baseline is the reward of the greedy answer to the same
# prompt. The step generates twice from the same prompts: n = 4 samples that
# the actor trains on, and one greedy answer per prompt (the call's own `n` and
# `temperature`), scored by the same reward. No critic, no group statistics:
# a sample's advantage is its reward minus its prompt's greedy reward.

include "common/arith_base.rl"

role actor {
  model = policy
  pool = main
  optim { lr = 1e-4 }
}

role rollout { colocate = actor  engine = hf  n = 4  temperature = 1.0  max_new_tokens = 4 }

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses, old_log_prob
  prompts -> rollout.generate(n = 1, temperature = 0) -> greedy
  responses -> exact -> scores
  greedy -> exact -> greedy_scores
  scores, greedy_scores -> remax_advantage -> advantages
  old_log_prob, advantages -> actor.update(clip = 0.2, epochs = 1, minibatch = 16)
}
