rlgraph 1
# On-policy distillation on two-digit addition: the student (builtin:arith-gpt, 0.438 greedy) samples, the
# teacher (builtin:arith-gpt-teacher, 0.862, the same tokenizer) scores each sampled token, and the student is
# updated on the teacher's log-prob minus its own (the negative per-token reverse KL) as the advantage: no
# reward in the step. The rule reward only scores validation. `rlgraph run specs/distill_arith.rl`.

model student { path = "builtin:arith-gpt" }

model teacher_model { path = "builtin:arith-gpt-teacher" }

pool main { nodes = 1  devices_per_node = 1  device = cpu }

role actor {
  model = student
  pool = main
  optim { lr = 1e-4 }
}

role rollout { colocate = actor  n = 4  temperature = 1.0  max_new_tokens = 4 }

role teacher { kind = ref  model = teacher_model  colocate = actor }  # frozen: scores, never trains

reward exact { fn = "rlgraph.tasks.arith:exact_match" }  # validation's score (no reward in the step)

data { train = "builtin:arith/train"  val = "builtin:arith/val"  batch_size = 32 }

step {
  prompts -> rollout.generate -> responses
  responses -> actor.log_prob -> old_log_prob
  responses -> teacher.log_prob -> teacher_log_prob
  old_log_prob, teacher_log_prob -> distill_advantage -> advantages
  old_log_prob, advantages -> actor.update(clip = 0.2, epochs = 2, minibatch = 16)
}

train { steps = 150  seed = 0  validate_every = 25  checkpoint_every = 150 }
