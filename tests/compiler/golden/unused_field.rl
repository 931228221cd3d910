rlgraph 1
# `returns` is computed but nothing reads it; `ref_log_prob` too.

model policy { path = "builtin:arith-gpt" }
pool main { nodes = 1  devices_per_node = 1 }

role actor { model = policy  pool = main }
role rollout { colocate = actor  n = 4 }
role ref { model = policy  colocate = actor }
reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 32 }

step {
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  responses -> ref.log_prob -> ref_log_prob  # W: unused-field
  scores -> grpo_advantage -> advantages, returns  # W: unused-field
  old_log_prob, advantages -> actor.update
}
