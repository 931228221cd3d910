rlgraph 1
# A misspelled role: in a weight sync and in a call.

model policy { path = "builtin:arith-gpt" }

pool main { nodes = 1  devices_per_node = 1 }

role actor { model = policy  pool = main }  # E: not-updated

role rollout { colocate = actor  n = 4 }

reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 8 }

step {
  sync actr -> rollout  # E: unknown-role
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actr.update  # E: unknown-role
}
