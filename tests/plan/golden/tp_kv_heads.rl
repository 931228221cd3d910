rlgraph 1
# 24 attention heads split over 12 devices, but 8 key/value heads neither split over 12 nor copy evenly.

model policy { path = "builtin:arith-gpt"  params = 3B  layers = 32  hidden = 3072  heads = 24  kv_heads = 8  vocab = 32000 }
pool gpus { nodes = 1  devices_per_node = 12  device = gpu  memory = 80GiB }

role actor { model = policy  pool = gpus  replicas = 12  strategy = fsdp  dtype = bf16  micro_batch = 4 }
role rollout { colocate = actor  engine = sglang  tp = 12  n = 4  dtype = bf16 }  # E: tp-heads  # W: engine-batch  # W: tp-not-implemented
reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 48 }

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update
}
