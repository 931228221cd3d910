rlgraph 1
# A trained role in fp16 cannot train (no loss scaling); bf16 keeps fp32 master weights. A frozen ref may be fp16.

model policy { path = "builtin:arith-gpt" }
pool main { nodes = 1  devices_per_node = 1 }

role actor { model = policy  pool = main  dtype = fp16 }  # E: untrainable-dtype
role rollout { colocate = actor  n = 4  dtype = fp16 }
role ref { model = policy  colocate = actor  dtype = fp16 }
reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 32 }

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  responses -> ref.log_prob -> ref_log_prob
  scores, old_log_prob, ref_log_prob -> kl_penalty -> rewards
  rewards -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update
}
