rlgraph 1
# Generation spreads the prompts over the rollout's replicas: 30 prompts over 4 of them.

model policy { path = "builtin:arith-gpt" }
pool train { nodes = 1  devices_per_node = 2 }
pool gen { nodes = 1  devices_per_node = 4 }

role actor { model = policy  pool = train  replicas = 2 }
role rollout { model = policy  pool = gen  replicas = 4  n = 2 }
reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 30 }  # E: batch-divisibility

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update
}
