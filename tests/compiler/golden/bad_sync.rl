rlgraph 1
# Syncs that cannot work: from a critic, to a reference policy, and into another model.

model policy { path = "builtin:arith-gpt" }
model other { path = "/models/other" }
pool main { nodes = 1  devices_per_node = 2 }
pool gen { nodes = 1  devices_per_node = 1 }

role actor { model = policy  pool = main  replicas = 2 }
role rollout { model = other  pool = gen  n = 4 }
role ref { model = policy  colocate = actor }
role critic { model = policy  colocate = actor }
reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 32 }

step {
  sync critic -> rollout  # E: bad-sync
  sync actor -> ref  # E: bad-sync
  sync actor -> rollout  # E: bad-sync
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  responses -> ref.log_prob -> ref_log_prob
  responses -> critic.values -> values
  scores, old_log_prob, ref_log_prob -> kl_penalty -> rewards
  rewards, values -> gae -> advantages, returns
  values, returns -> critic.update
  old_log_prob, advantages -> actor.update
}
