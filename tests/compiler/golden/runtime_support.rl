rlgraph 1
# What rlgraph's runtime cannot run (`run` refuses the spec) or would ignore (it runs without it).

model policy { path = "builtin:arith-gpt" }
pool main { nodes = 1  devices_per_node = 2 }

role actor {
  model = policy
  pool = main
  strategy = fsdp  # W: setting-ignored
}
role rollout {
  colocate = actor
  n = 4
  tp = 2  # W: tp-not-implemented
  memory_fraction = 0.3  # W: setting-ignored
  dtype = bf16  # W: setting-ignored
}
role sampler { kind = rollout  colocate = actor  engine = vllm  n = 4 }  # vllm: a copy of its own, dtype honoured
reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 32 }

step {
  prompts -> rollout.generate -> responses
  prompts -> sampler.generate -> more  # W: unused-field
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update
}
