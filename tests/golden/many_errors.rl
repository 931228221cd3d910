rlgraph 1
# Every problem in a file is reported, not just the first.

model policy { path = "builtin:arith-gpt"  layers = 0 }  # E: wrong-type

pool main { nodes = 1  devices_per_node = 1  device = tpu }  # E: wrong-type

role actor {
  model = policy
  pool = main
  optim { lr = 1e-4  momentum = 0.9 }  # E: unknown-key
}

role rollout { colocate = actor  n = 4  engine = tensorrt }  # E: wrong-type

role critic { model = value_model  colocate = actor }  # E: unknown-model  # E: not-updated

reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 8 }

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update(clip = 0.2, epoch = 2)  # E: unknown-key
}
