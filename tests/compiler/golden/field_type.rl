rlgraph 1
# Responses where per-token values belong, and the other way round.

model policy { path = "builtin:arith-gpt" }
pool main { nodes = 1  devices_per_node = 1 }

role actor { model = policy  pool = main }
role rollout { colocate = actor  n = 4 }
reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 32 }

step {
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  scores -> actor.log_prob -> old_log_prob  # E: field-type
  responses -> grpo_advantage -> advantages  # E: field-type
  old_log_prob, advantages -> actor.update
}
