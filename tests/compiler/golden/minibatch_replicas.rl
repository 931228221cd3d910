rlgraph 1
# A mini-batch of 2 prompts × n=1 = 2 samples cannot be shared by 4 replicas.

model policy { path = "builtin:arith-gpt" }
pool main { nodes = 1  devices_per_node = 4 }

role actor { model = policy  pool = main  replicas = 4 }
role rollout { colocate = actor  n = 1 }
reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 32 }

step {
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  scores -> reinforce_pp_advantage -> advantages
  old_log_prob, advantages -> actor.update(minibatch = 2)  # E: batch-divisibility
}
