rlgraph 1
# GRPO normalises each prompt's rewards over its samples: one sample per prompt is no group.

model policy { path = "builtin:arith-gpt" }
pool main { nodes = 1  devices_per_node = 1 }

role actor { model = policy  pool = main }
role rollout { colocate = actor  n = 1  temperature = 1.0 }  # W: single-sample-group
reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 32 }

step {
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update
}
