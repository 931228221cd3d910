rlgraph 1
# ReMax's baseline is the score of another answer: not the trained samples' own scores.

model policy { path = "builtin:arith-gpt" }
pool main { nodes = 1  devices_per_node = 1 }

role actor { model = policy  pool = main }
role rollout { colocate = actor  n = 4 }
reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 32 }

step {
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  scores, scores -> remax_advantage -> advantages  # E: algorithm
  old_log_prob, advantages -> actor.update
}
