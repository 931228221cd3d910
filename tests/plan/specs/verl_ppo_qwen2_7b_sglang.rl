rlgraph 1
# verl's examples/ppo_trainer/run_qwen2-7b_sglang_seq_balance.sh as a spec: PPO with GAE, Qwen2-7B-Instruct
# for actor and critic on one node of 8 x 80 GiB, SGLang at tp 2 taking half of each device, 4096 prompts of up
# to 4096 tokens and responses of up to 4096, token-budget micro-batches and gradient checkpointing.

model qwen {
  path = "Qwen/Qwen2-7B-Instruct"
  params = 7.6B
  layers = 28
  hidden = 3584
  heads = 28
  kv_heads = 4
  vocab = 152064
}

pool gpus { nodes = 1  devices_per_node = 8  device = gpu  memory = 80GiB }

role actor {
  model = qwen
  pool = gpus
  replicas = 8
  strategy = fsdp
  dtype = bf16
  micro_batch_tokens = 24000
  gradient_checkpointing = true
  optim { lr = 1e-6 }
}

role rollout {
  colocate = actor
  engine = sglang
  tp = 2
  memory_fraction = 0.5
  max_new_tokens = 4096
  dtype = bf16
}

role critic {
  model = qwen
  colocate = actor
  strategy = fsdp
  dtype = bf16
  micro_batch_tokens = 98304
  gradient_checkpointing = true
  optim { lr = 1e-5 }
}

reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 4096  max_prompt_length = 4096 }

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  responses -> critic.values -> values
  scores, values -> gae(gamma = 1.0, lam = 1.0) -> advantages, returns
  values, returns -> critic.update(minibatch = 512)
  old_log_prob, advantages -> actor.update(minibatch = 512)
}
