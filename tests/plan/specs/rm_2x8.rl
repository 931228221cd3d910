rlgraph 1
# Test fixture: PPO on a 7B policy, 2 nodes x 8 GPUs; the reward model has a pool (node) of its own.

model policy { path = "/models/qwen2.5-7b"  params = 7.6B  layers = 28  hidden = 3584  heads = 28  kv_heads = 4  vocab = 152064 }
model judge  { path = "/models/qwen2.5-7b-rm"  params = 7.1B  layers = 28  hidden = 3584  heads = 28  kv_heads = 4 }

pool train  { nodes = 1  devices_per_node = 8  device = gpu  memory = 80GiB }
pool reward { nodes = 1  devices_per_node = 8  device = gpu  memory = 80GiB }

role actor {
  model = policy  pool = train  replicas = 8  strategy = fsdp  dtype = bf16
  micro_batch = 8  gradient_checkpointing = true
  optim { lr = 1e-6 }
}
role rollout { colocate = actor  engine = sglang  tp = 2  n = 4  max_new_tokens = 1024  dtype = bf16 }
role ref { model = policy  colocate = actor  dtype = bf16  micro_batch = 8 }
role critic {
  model = policy  colocate = actor  strategy = fsdp  dtype = bf16
  micro_batch = 8  gradient_checkpointing = true
  optim { lr = 1e-5 }
}
role reward_model { model = judge  pool = reward  replicas = 8  dtype = bf16  micro_batch = 8 }

data { train = "/data/gsm8k/train.parquet"  batch_size = 256  max_prompt_length = 1024 }

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> reward_model.score -> scores
  responses -> actor.log_prob -> old_log_prob
  responses -> ref.log_prob -> ref_log_prob
  responses -> critic.values -> values
  scores, old_log_prob, ref_log_prob -> kl_penalty(kind = k1, coef = 0.001) -> rewards
  rewards, values -> gae(gamma = 1.0, lam = 0.95) -> advantages, returns
  values, returns -> critic.update(epochs = 1, minibatch = 64)
  old_log_prob, advantages -> actor.update(clip = 0.2, epochs = 1, minibatch = 64)
}

train { steps = 100 }
