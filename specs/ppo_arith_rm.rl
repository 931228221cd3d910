rlgraph 1
# PPO on two-digit addition, rewarded by a learned reward model instead of the
# rule: builtin:arith-rm, a sequence classifier trained by
# rlgraph/models/build_arith_rm.py to score 1 for a right sum and 0 for a wrong
# one (0.96 held-out accuracy), on a pool of its own (verl's reward_pool). The
# policy never sees the rule during training; validation still scores greedy
# answers with the rule `exact`, so the number is the true accuracy.
# The reward model ships with rlgraph (rlgraph/models/weights/arith-rm).

model policy { path = "builtin:arith-gpt" }

model scorer { path = "builtin:arith-rm" }

pool main { nodes = 1  devices_per_node = 1  device = cpu }

pool reward { nodes = 1  devices_per_node = 1  device = cpu }

role actor {
  model = policy
  pool = main
  optim { lr = 1e-4 }
}

role rollout { colocate = actor  engine = hf  n = 4  temperature = 1.0  max_new_tokens = 4 }

role ref { model = policy  colocate = actor }

role critic {
  model = policy
  colocate = actor
  optim { lr = 1e-3 }
}

role rm { kind = reward_model  model = scorer  pool = reward }

reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  val = "builtin:arith/val"  batch_size = 32 }

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> rm.score -> scores
  responses -> actor.log_prob -> old_log_prob
  responses -> ref.log_prob -> ref_log_prob
  responses -> critic.values -> values
  scores, old_log_prob, ref_log_prob -> kl_penalty(kind = k1, coef = 0.001) -> rewards
  rewards, values -> gae(gamma = 1.0, lam = 0.95) -> advantages, returns
  values, returns -> critic.update(epochs = 2, minibatch = 16)
  old_log_prob, advantages -> actor.update(clip = 0.2, epochs = 2, minibatch = 16)
}

train { steps = 120  seed = 0  validate_every = 20  checkpoint_every = 40 }
