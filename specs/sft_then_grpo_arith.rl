rlgraph 1
# The second stage of SFT then RL: GRPO on two-digit addition from the model specs/sft_arith.rl trained
# (`run:sft_arith.rl`: the newest checkpoint's actor of runs/sft_arith, where `rlgraph run specs/sft_arith.rl`
# writes it). From the untrained builtin:arith-gpt-init every sample scores 0 and GRPO has nothing to learn
# from; after SFT on 500 demonstrations some answers are right, and GRPO's groups tell them apart.
#
#   rlgraph run specs/sft_arith.rl             # stage 1: SFT
#   rlgraph run specs/sft_then_grpo_arith.rl   # stage 2: GRPO from stage 1's model

model policy { path = "run:sft_arith.rl" }

pool main { nodes = 1  devices_per_node = 1  device = cpu }

role actor {
  model = policy
  pool = main
  optim { lr = 1e-4 }
}

role rollout { colocate = actor  engine = hf  n = 8  temperature = 1.0  max_new_tokens = 4 }

role ref { model = policy  colocate = actor }

reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  val = "builtin:arith/val"  batch_size = 32 }

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses, old_log_prob
  responses -> exact -> scores
  responses -> ref.log_prob -> ref_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages, ref_log_prob -> actor.update(clip = 0.2, epochs = 1, minibatch = 16, kl_coef = 0.001, kl_kind = low_var_kl)
}

train { steps = 100  seed = 0  validate_every = 10  checkpoint_every = 50 }
