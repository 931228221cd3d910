rlgraph 1
# Overlong shaping penalises the last buffer tokens before max_new_tokens (32 by default).

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
  scores -> overlong_penalty(buffer = 40) -> rewards  # E: wrong-type
  rewards -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update
}
