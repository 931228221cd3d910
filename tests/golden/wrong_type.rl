rlgraph 1
# Values of the wrong type or out of range.

model policy { path = builtin }  # E: wrong-type

pool main { nodes = 1  devices_per_node = 1  memory = 80 }  # E: wrong-type

role actor {
  model = policy
  pool = main
  replicas = "1"  # E: wrong-type
  optim { lr = -1e-4 }  # E: wrong-type
}

role rollout { colocate = actor  n = 4  top_p = 1.5 }  # E: wrong-type

reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 8  shuffle = yes }  # E: wrong-type

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update(epochs = 1.5)  # E: wrong-type
}
