rlgraph 1
# Qwen2-7B has 28 attention heads: tensor parallelism over 8 devices cannot give each an equal share.

model policy { path = "qwen2-7b" }
pool gpus { nodes = 1  devices_per_node = 8  device = gpu  memory = 80GiB }

role actor { model = policy  pool = gpus  replicas = 8  strategy = fsdp  dtype = bf16  micro_batch = 4 }
role rollout { colocate = actor  engine = sglang  tp = 8  n = 4  dtype = bf16 }  # E: tp-heads  # W: engine-batch
reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 32 }

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update
}
