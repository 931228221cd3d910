rlgraph 1
# On GPUs, a role without micro_batch runs each pass on all the samples a device gets: the actor's update
# takes 16 prompts × n=4 / 4 replicas = 16 samples at once, its log_prob 64 (its share of the whole step),
# and the critic's values 64 too. The ref sets one. CPU pools are not warned (every other golden file).

model policy { path = "builtin:arith-gpt" }
pool gpus { nodes = 1  devices_per_node = 4  device = gpu }
pool critic_gpus { nodes = 1  devices_per_node = 4  device = gpu }

role actor { model = policy  pool = gpus  replicas = 4 }  # W: micro-batch-unset
role rollout { colocate = actor  n = 4 }
role ref { model = policy  colocate = actor  micro_batch = 4 }
role critic { model = policy  head = value  pool = critic_gpus  replicas = 4 }  # W: micro-batch-unset
reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 64 }

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  responses -> ref.log_prob -> ref_log_prob
  responses -> critic.values -> values
  scores, old_log_prob, ref_log_prob -> kl_penalty(kind = k1, coef = 0.001) -> rewards
  rewards, values -> gae(gamma = 1.0, lam = 0.95) -> advantages, returns
  values, returns -> critic.update(minibatch = 8)
  old_log_prob, advantages -> actor.update(minibatch = 16)
}
