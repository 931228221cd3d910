rlgraph 1
# The same name twice: a block repeated in one file, a key repeated in a block,
# a pool and a role sharing a name.

model policy { path = "builtin:arith-gpt" }

pool main { nodes = 1  devices_per_node = 1 }

role actor {
  model = policy
  pool = main
  pool = main  # E: duplicate-name
}

role rollout { colocate = actor  n = 4 }

role rollout { colocate = actor  n = 8 }  # E: duplicate-name

role main { kind = ref  model = policy  colocate = actor }  # E: duplicate-name

reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 8 }

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update
}
