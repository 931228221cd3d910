rlgraph 1
# The KL penalty was meant to read `scores`, but reads `advantages`, which is computed from its output.

model policy { path = "builtin:arith-gpt" }
pool main { nodes = 1  devices_per_node = 1 }

role actor { model = policy  pool = main }
role rollout { colocate = actor  n = 4 }
role ref { model = policy  colocate = actor }
reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 32 }

step {
  prompts -> rollout.generate -> responses
  responses -> exact -> scores  # W: unused-field
  responses -> actor.log_prob -> old_log_prob
  responses -> ref.log_prob -> ref_log_prob
  advantages, old_log_prob, ref_log_prob -> kl_penalty -> rewards  # E: cycle
  rewards -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update
}
