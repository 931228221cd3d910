rlgraph 1
# A trained role's param_offload is FSDP2's CPU offload policy: it needs strategy = fsdp over 2 or more replicas.
# optimizer_offload works under ddp and with one replica; a ref may offload its weights however it is placed.

model policy { path = "builtin:arith-gpt" }
pool main { nodes = 1  devices_per_node = 2 }
pool side { nodes = 1  devices_per_node = 1 }

role actor { model = policy  pool = main  replicas = 2  param_offload = true }  # E: offload-unsharded
role rollout { colocate = actor  n = 4 }
role ref { model = policy  colocate = actor  param_offload = true }
role critic { model = policy  pool = side  strategy = fsdp  param_offload = true  optimizer_offload = true }  # E: offload-unsharded  # W: setting-ignored
reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 32 }

step {
  sync actor -> rollout
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
