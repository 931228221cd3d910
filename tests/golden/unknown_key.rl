rlgraph 1
# Keys a block does not have: a typo, a key of another role kind, an optimizer
# key outside `optim`, an unknown call argument.

model policy { path = "builtin:arith-gpt" }

pool main { nodes = 1  devices_per_node = 1 }

role actor {
  model = policy
  pool = main
  lr = 1e-4  # E: unknown-key
}

role rollout { colocate = actor  n = 4  temprature = 0.7 }  # E: unknown-key

reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 8  head = value }  # E: unknown-key

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  scores -> grpo_advantage(norm = false) -> advantages  # E: unknown-key
  old_log_prob, advantages -> actor.update
}
