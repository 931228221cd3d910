rlgraph 1
# micro_batch_tokens is a token budget per forward pass: it must hold one whole row (64 prompt tokens + 6 new
# tokens here), and it replaces micro_batch rather than adding to it.

model policy { path = "builtin:arith-gpt" }
pool main { nodes = 1  devices_per_node = 1 }

role actor { model = policy  pool = main  micro_batch_tokens = 64 }  # E: token-budget
role rollout { colocate = actor  n = 4  max_new_tokens = 6 }
role ref { model = policy  colocate = actor  micro_batch = 8  micro_batch_tokens = 1024 }  # E: token-budget
reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 32  max_prompt_length = 64 }

step {
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  responses -> ref.log_prob -> ref_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages, ref_log_prob -> actor.update(kl_coef = 0.001)
}
