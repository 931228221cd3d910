rlgraph 1
# A critic computes values for GAE, but the step never trains it.

model policy { path = "builtin:arith-gpt" }
pool main { nodes = 1  devices_per_node = 1 }

role actor { model = policy  pool = main }
role rollout { colocate = actor  n = 4 }
role critic { model = policy  colocate = actor }  # E: not-updated
reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 32 }

step {
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  responses -> critic.values -> values
  scores, values -> gae -> advantages, returns  # W: unused-field
  old_log_prob, advantages -> actor.update
}
