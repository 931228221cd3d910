rlgraph 1
# On-policy distillation with the teacher's whole next-token distribution (GKD) on two-digit addition: the
# student (builtin:arith-gpt, 0.438 greedy) samples, the teacher (builtin:arith-gpt-teacher, 0.862, the same
# tokenizer) gives its next-token log-probs at every position of those samples, and the student is trained on
# its divergence from them (beta = 0: the forward KL, the teacher's soft labels at the student's own prefixes):
# no reward in the step, the rule reward only scores validation. One sample per prompt (the teacher's whole
# distribution at the first answer token is the same for every sample of a prompt) and 256 prompts a step, at
# the teacher's own training recipe's learning rate, warm-up and weight decay, decayed by a cosine.
# `rlgraph run specs/distill_arith_gkd.rl` (docs/results.md: the numbers, and specs/distill_arith.rl's
# sampled-token estimate beside it).

model student { path = "builtin:arith-gpt" }

model teacher_model { path = "builtin:arith-gpt-teacher" }

pool main { nodes = 1  devices_per_node = 1  device = cpu }

role actor {
  model = student
  pool = main
  optim { lr = 5e-3  warmup_steps = 50  weight_decay = 0.01  schedule = cosine  min_lr_ratio = 0.1 }
}

role rollout { colocate = actor  n = 1  temperature = 1.0  max_new_tokens = 4 }

role teacher { kind = ref  model = teacher_model  colocate = actor }  # frozen: scores, never trains

reward exact { fn = "rlgraph.tasks.arith:exact_match" }  # validation's score (no reward in the step)

data { train = "builtin:arith/train"  val = "builtin:arith/val"  batch_size = 256 }

step {
  prompts -> rollout.generate -> responses
  responses -> teacher.top_k -> teacher_top_k
  teacher_top_k -> actor.distill(beta = 0.0)
}

train { steps = 400  seed = 0  validate_every = 50  checkpoint_every = 400 }
