rlgraph 1
# tests/runtime/specs/grpo_split.rl with the rollout colocated with the actor:
# the synchronous step in one process, which the split spec's pipelined loop
# must reproduce at train.staleness = 0 (tests/runtime/test_async.py).

include "../../../specs/common/arith_base.rl"

role actor {
  model = policy
  pool = main
  optim { lr = 1e-4 }
}

role rollout {
  colocate = actor
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
