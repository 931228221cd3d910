rlgraph 1
# Truncated importance sampling weighs by the rollout's sampling log-probs, but generate keeps none.

model policy { path = "builtin:arith-gpt" }
pool main { nodes = 1  devices_per_node = 1 }
pool gen { nodes = 1  devices_per_node = 1 }

role actor { model = policy  pool = main }
role rollout { model = policy  pool = gen  n = 4 }
reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 32 }

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update(tis = sequence)  # E: algorithm
}
