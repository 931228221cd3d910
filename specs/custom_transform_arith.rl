rlgraph 1
# RLOO on two-digit addition with an advantage estimator and a policy loss written by the user, in
# specs/algos/my_advantage.py, not in rlgraph: a `transform` block declares a function's inputs, outputs and
# arguments, a `loss` block a policy loss. `rlgraph check` holds every call to its declaration without
# importing the module; `rlgraph run` imports it and checks its signature before anything starts.

include "common/arith_base.rl"

role actor {
  model = policy
  pool = main
  optim { lr = 1e-4 }
}

role rollout { colocate = actor  engine = hf  n = 8  temperature = 1.0  max_new_tokens = 4 }

# advantages = reward - baseline_weight x the mean reward of the prompt's other responses (1.0: RLOO)
transform leave_one_out {
  fn = "algos/my_advantage.py:leave_one_out"
  inputs = [scores]
  outputs = [advantages]
  args { baseline_weight = 1.0 }
}

loss clipped_token_mean {
  fn = "algos/my_advantage.py:clipped_token_mean"
  args { max_ratio = 3.0 }
}

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses, old_log_prob
  responses -> exact -> scores
  scores -> leave_one_out -> advantages
  old_log_prob, advantages -> actor.update(clip = 0.2, epochs = 1, minibatch = 16, policy_loss = clipped_token_mean)
}
