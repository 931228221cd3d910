rlgraph 1
# PPO on two-digit addition with split placement: the policy side (actor,
# rollout, reference) shares one pool and the critic has a pool of its own, so
# critic.values runs beside ref.log_prob and critic.update beside actor.update.
# Both pools are a single CPU device: with one device per pool, each role has
# one replica. On a cluster, raise `devices_per_node` and `replicas` together.

model policy { path = "builtin:arith-gpt" }

pool train_pool { nodes = 1  devices_per_node = 1  device = cpu }

pool critic_pool { nodes = 1  devices_per_node = 1  device = cpu }

role actor {
  model = policy
  pool = train_pool
  optim { lr = 1e-4 }
}

role rollout { colocate = actor  engine = hf  n = 4  temperature = 1.0  max_new_tokens = 4 }

role ref { model = policy  colocate = actor }

role critic {
  model = policy
  pool = critic_pool
  optim { lr = 1e-3 }
}

reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  val = "builtin:arith/val"  batch_size = 32 }

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  responses -> ref.log_prob -> ref_log_prob
  responses -> critic.values -> values
  scores, old_log_prob, ref_log_prob -> kl_penalty(kind = k1, coef = 0.001) -> rewards
  rewards, values -> gae(gamma = 1.0, lam = 0.95) -> advantages, returns
  values, returns -> critic.update(epochs = 2, minibatch = 16)
  old_log_prob, advantages -> actor.update(clip = 0.2, epochs = 2, minibatch = 16)
}

train { steps = 60  seed = 0  validate_every = 10  checkpoint_every = 20 }
