rlgraph 1
# Role calls read one rollout per step: here they read two generate calls' outputs.

model policy { path = "builtin:arith-gpt" }
pool main { nodes = 1  devices_per_node = 1 }

role actor { model = policy  pool = main }
role rollout { colocate = actor  n = 4 }
reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 32 }

step {
  prompts -> rollout.generate -> responses
  prompts -> rollout.generate(n = 1, temperature = 0) -> greedy
  responses -> exact -> scores
  greedy -> exact -> greedy_scores
  responses -> actor.log_prob -> old_log_prob
  greedy -> actor.log_prob -> greedy_log_prob  # E: several-rollouts  # W: unused-field
  scores, greedy_scores -> remax_advantage -> advantages
  old_log_prob, advantages -> actor.update
}
