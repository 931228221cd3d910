rlgraph 1
# The asynchronous-training benchmark (bench/bench_async.py): GRPO on two-digit
# addition with the rollout and the actor on one-device pools of their own, and
# no reference policy (no KL term, as in DAPO's recipe); the rollout keeps the
# log-probs of its samples (the behaviour policy's) as old_log_prob and the actor
# makes one update per step, so that generation is a real share of the step.
# train.staleness is set by the benchmark (0 and 1).

include "../../specs/common/arith_base.rl"

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

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses, old_log_prob
  responses -> exact -> scores
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update(clip = 0.2, epochs = 1)
}
