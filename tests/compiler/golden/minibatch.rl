rlgraph 1
# Mini-batches count prompts (like verl's ppo_mini_batch_size): 12 does not divide 32, 64 is more than 32.

model policy { path = "builtin:arith-gpt" }
pool main { nodes = 1  devices_per_node = 2 }

role actor { model = policy  pool = main  replicas = 2 }
role rollout { colocate = actor  n = 4 }
role critic { model = policy  colocate = actor }
reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 32 }

step {
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  responses -> critic.values -> values
  scores, values -> gae -> advantages, returns
  values, returns -> critic.update(minibatch = 64)  # E: batch-divisibility
  old_log_prob, advantages -> actor.update(minibatch = 12)  # E: batch-divisibility
}
