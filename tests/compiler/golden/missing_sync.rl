rlgraph 1
# The rollout runs on its own pool and nothing syncs the trained weights to it.

model policy { path = "builtin:arith-gpt" }
pool train { nodes = 1  devices_per_node = 2 }
pool gen { nodes = 1  devices_per_node = 2 }

role actor { model = policy  pool = train  replicas = 2 }
role rollout { model = policy  pool = gen  replicas = 2  n = 4 }
reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 32 }

step {
  prompts -> rollout.generate -> responses  # W: missing-sync
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update
}
