rlgraph 1
# specs/grpo_arith.rl with its estimator and its policy loss declared by the user (user_algos.py, next to
# this file): the same advantages and the same loss as the built-ins, computed outside rlgraph.

include "../../../specs/grpo_arith.rl"

transform my_grpo {
  fn = "user_algos.py:group_normalised"
  inputs = [scores]
  outputs = [advantages]
  args { epsilon = 1e-3 }
}

loss my_ppo {
  fn = "user_algos:builtin_ppo"
  args { scale = 1.0 }
}

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses, old_log_prob
  responses -> exact -> scores
  responses -> ref.log_prob -> ref_log_prob
  scores -> my_grpo(epsilon = 1e-6) -> advantages
  old_log_prob, advantages, ref_log_prob -> actor.update(clip = 0.2, epochs = 1, minibatch = 16, kl_coef = 0.001, kl_kind = low_var_kl, policy_loss = my_ppo)
}
