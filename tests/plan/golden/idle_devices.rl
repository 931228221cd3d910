rlgraph 1
# The actor and the rollout hold 4 of the pool's 8 devices; a second pool is never used.

model policy { path = "builtin:arith-gpt" }
pool main { nodes = 1  devices_per_node = 8 }  # W: idle-devices
pool spare { nodes = 2  devices_per_node = 2 }  # W: idle-devices

role actor { model = policy  pool = main  replicas = 2 }
role rollout { model = policy  pool = main  replicas = 2  n = 4 }
reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 32 }

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update
}
