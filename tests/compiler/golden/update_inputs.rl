rlgraph 1
# Updates fed by the wrong producers: the actor's old log-probs from the reference policy,
# and the values of one critic handed to the update of another.

model policy { path = "builtin:arith-gpt" }
pool main { nodes = 1  devices_per_node = 1 }

role actor { model = policy  pool = main }
role rollout { colocate = actor  n = 4 }
role ref { model = policy  colocate = actor }
role critic { model = policy  colocate = actor }
role critic2 { kind = critic  model = policy  colocate = actor }
reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 32 }

step {
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> ref.log_prob -> ref_log_prob
  responses -> critic.values -> values
  responses -> critic2.values -> values2  # W: unused-field
  scores, values -> gae -> advantages, returns
  values, returns -> critic.update
  values, returns -> critic2.update  # E: algorithm
  ref_log_prob, advantages -> actor.update  # E: algorithm
}
