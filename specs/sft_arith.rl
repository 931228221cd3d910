rlgraph 1
# Supervised fine-tuning (SFT) on two-digit addition: the untrained builtin:arith-gpt-init (0% greedy)
# learns from 500 demonstrations (builtin:arith/sft: each prompt with its right answer as `response`). The loss
# is the negative log-likelihood of the response tokens and EOS, never of the prompt's (verl's SFT trainer).
# There is no rollout: validation reports the NLL of the validation demonstrations (val/sft_loss) and, with
# the rule reward below, the greedy accuracy of the actor's answers (val/score/mean).
# The second stage, GRPO from this run's model: specs/sft_then_grpo_arith.rl (docs/spec.md, Stages).

model policy { path = "builtin:arith-gpt-init" }

pool main { nodes = 1  devices_per_node = 1  device = cpu }

role actor {
  model = policy
  pool = main
  optim { lr = 5e-3  warmup_steps = 50  weight_decay = 0.01 }
}

reward exact { fn = "rlgraph.tasks.arith:exact_match" }  # validation's score (no reward in the step)

data {
  train = "builtin:arith/sft"
  val = "builtin:arith/sft_val"
  batch_size = 64
  max_response_length = 4
}

step {
  demos -> actor.sft
}

train { steps = 600  seed = 0  validate_every = 100  checkpoint_every = 300 }
