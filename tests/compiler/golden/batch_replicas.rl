rlgraph 1
# 32 prompts × n=4 = 128 samples cannot be shared by 3 training replicas.

model policy { path = "builtin:arith-gpt" }
pool train { nodes = 1  devices_per_node = 3 }
pool gen { nodes = 1  devices_per_node = 2 }

role actor { model = policy  pool = train  replicas = 3 }
role rollout { model = policy  pool = gen  replicas = 2  n = 4 }
role ref { model = policy  colocate = actor }
reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 32 }  # E: batch-divisibility

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  responses -> ref.log_prob -> ref_log_prob
  scores, old_log_prob, ref_log_prob -> kl_penalty -> rewards
  rewards -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update
}
