rlgraph 1
# micro_batch counts samples per device: each of 2 replicas gets 8 prompts × n=4 / 2 = 16 samples.

model policy { path = "builtin:arith-gpt" }
pool main { nodes = 1  devices_per_node = 2 }

role actor { model = policy  pool = main  replicas = 2  micro_batch = 12 }  # E: batch-divisibility
role rollout { colocate = actor  n = 4 }
reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 32 }

step {
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update(minibatch = 8)
}
