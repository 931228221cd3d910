rlgraph 1
# LoRA adapters train on an unsharded actor only: with strategy = fsdp over 2 replicas `run` refuses the spec.
# One replica with fsdp trains as ddp (setting-ignored), so its adapters are fine.

model policy { path = "builtin:arith-gpt" }
pool main { nodes = 1  devices_per_node = 2 }

role actor { model = policy  pool = main  replicas = 2  strategy = fsdp  lora { rank = 8 } }  # W: lora-not-implemented
role rollout { colocate = actor  n = 4 }
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
