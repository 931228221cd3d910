rlgraph 1
# PPO on two-digit addition scored by a reward model on a pool of its own; a test asset (there is no
# built-in arithmetic reward model yet): give the model with `-s scorer.path="DIR"`.
# Validation scores with the declared rule reward `exact` (the step itself uses the reward model).

model policy { path = "builtin:arith-gpt" }
model scorer { path = "builtin:arith-gpt"  params = 300000 }

pool main { nodes = 1  devices_per_node = 1  device = cpu }
pool reward { nodes = 1  devices_per_node = 1  device = cpu }

role actor { model = policy  pool = main  optim { lr = 1e-4 } }
role rollout { colocate = actor  engine = hf  n = 4  temperature = 1.0  max_new_tokens = 4 }
role ref { model = policy  colocate = actor }
role critic { model = policy  colocate = actor  optim { lr = 1e-3 } }
role rm { kind = reward_model  model = scorer  pool = reward }

reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  val = "builtin:arith/val"  batch_size = 16 }

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> rm.score -> scores
  responses -> actor.log_prob -> old_log_prob
  responses -> ref.log_prob -> ref_log_prob
  responses -> critic.values -> values
  scores, old_log_prob, ref_log_prob -> kl_penalty(kind = k1, coef = 0.001) -> rewards
  rewards, values -> gae(gamma = 1.0, lam = 0.95) -> advantages, returns
  values, returns -> critic.update(epochs = 1, minibatch = 16)
  old_log_prob, advantages -> actor.update(clip = 0.2, epochs = 1, minibatch = 16)
}

train { steps = 2  seed = 0  validate_every = 0  checkpoint_every = 0 }
