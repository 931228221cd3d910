rlgraph 1
# A KL penalty in the reward that compares the actor with itself: no reference policy.

model policy { path = "builtin:arith-gpt" }
pool main { nodes = 1  devices_per_node = 1 }

role actor { model = policy  pool = main }
role rollout { colocate = actor  n = 4 }
reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 32 }

step {
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  scores, old_log_prob, old_log_prob -> kl_penalty(coef = 0.001) -> rewards  # E: algorithm
  rewards -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update
}
