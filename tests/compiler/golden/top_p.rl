rlgraph 1
# Nucleus sampling keeps the likeliest tokens whose mass reaches top_p: at 0 it keeps none.

model policy { path = "builtin:arith-gpt" }
pool main { nodes = 1  devices_per_node = 1 }

role actor { model = policy  pool = main }
role rollout { colocate = actor  n = 4  top_p = 0 }  # E: wrong-type
reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 32 }

step {
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update
}
