rlgraph 1
# A second generate's rows are its own prompts x n: only a baseline, never per-sample values.

model policy { path = "builtin:arith-gpt" }
pool main { nodes = 1  devices_per_node = 1 }

role actor { model = policy  pool = main }
role rollout { colocate = actor  n = 4 }
reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 32 }

step {
  prompts -> rollout.generate -> responses
  prompts -> rollout.generate(n = 1, temperature = 0) -> greedy
  greedy -> exact -> greedy_scores
  responses -> actor.log_prob -> old_log_prob
  greedy_scores -> grpo_advantage -> advantages  # E: algorithm
  old_log_prob, advantages -> actor.update
}
