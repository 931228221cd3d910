rlgraph 1
# A step that scores prompts it never generated responses for.

model policy { path = "builtin:arith-gpt" }
pool main { nodes = 1  devices_per_node = 1 }

role actor { model = policy  pool = main }
role rollout { colocate = actor  n = 4 }  # W: unused-role
reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 32 }

step {  # E: algorithm
  responses -> exact -> scores  # E: undefined-field
  responses -> actor.log_prob -> old_log_prob  # E: undefined-field
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update
}
