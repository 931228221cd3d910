rlgraph 1
# PPO with GAE for Qwen2-7B-Instruct on GSM8K, scored by a reward model, on a
# cluster of 2 nodes x 8 GPUs (80 GiB each). Modelled on verl's
# examples/ppo_trainer/run_qwen2-7b_rm.sh: the same batch sizes, learning rates,
# KL coefficient and epochs.
#
# Layout: three pools of 2 nodes each, which Ray packs onto the same 2 physical
# nodes, 4 + 2 + 2 = 8 GPUs per node, 16 in all:
#   actor_gpus  (2 x 4)  actor (FSDP, 8 replicas), rollout (tp 2, 4 replicas), ref
#   critic_gpus (2 x 2)  critic (FSDP, 4 replicas)
#   reward_gpus (2 x 2)  the reward model (4 replicas)
# The batch sizes are powers of two (1024 prompts, mini-batches of 256), so
# every data-parallel size must be one too: 8 + 4 + 4 is the split of 16 that
# gives the policy most of the devices. The critic on its own pool updates
# beside the actor, and the reward model scores beside ref and critic.
#
# Memory per device (policy 7.6B params, bf16 with fp32 master weights):
#   actor   7.6e9 x (2 bf16 + 4 fp32 master + 8 Adam + 2 grads) / 8 shards = 15.2 GB
#   ref     7.6e9 x 2 bytes / 8 shards                                    =  1.9 GB
#   rollout 7.6e9 x 2 bytes / tp 2                                        =  7.6 GB
#           KV cache: 2 x 28 layers x 4 kv heads x 128 dims x 2 bytes = 56 KiB a token;
#           256 samples a replica x (1024 + 512) tokens x 56 KiB / tp 2    = 11.3 GB
#   -> 36.0 GB (33.5 GiB) of 80 GiB; the rollout engine may take up to 40 GiB
#      (memory_fraction 0.5), which still leaves room for activations.
#   critic  7.6e9 x 16 bytes / 4 shards = 30.4 GB (28.3 GiB)
#   rm      8e9 x 2 bytes, a full copy each = 16 GB (14.9 GiB)
#
# Steps: GSM8K's 7,473 training prompts make 7 full batches of 1024 per epoch;
# verl's 15 epochs are 105 steps. Warm-up is 10% (actor) and 5% (critic).

model policy {
  path = "/models/Qwen2-7B-Instruct"
  params = 7.6B
  layers = 28
  hidden = 3584
  heads = 28
  kv_heads = 4
  vocab = 152064
}

model fsfairx {
  path = "/models/FsfairX-LLaMA3-RM-v0.1"
  params = 8B
  layers = 32
  hidden = 4096
  heads = 32
  kv_heads = 8
  vocab = 128256
}

pool actor_gpus { nodes = 2  devices_per_node = 4  device = gpu  memory = 80GiB }

pool critic_gpus { nodes = 2  devices_per_node = 2  device = gpu  memory = 80GiB }

pool reward_gpus { nodes = 2  devices_per_node = 2  device = gpu  memory = 80GiB }

role actor {
  model = policy
  pool = actor_gpus
  replicas = 8
  strategy = fsdp
  dtype = bf16
  micro_batch = 16
  gradient_checkpointing = true
  optim { lr = 1e-6  warmup_steps = 10 }
}

role rollout {
  colocate = actor
  engine = sglang
  tp = 2
  n = 1
  temperature = 1.0
  max_new_tokens = 512
  memory_fraction = 0.5
  dtype = bf16
}

role ref { model = policy  colocate = actor  dtype = bf16  micro_batch = 16 }

role critic {
  model = policy
  pool = critic_gpus
  replicas = 4
  strategy = fsdp
  dtype = bf16
  micro_batch = 16
  gradient_checkpointing = true
  optim { lr = 1e-5  warmup_steps = 5 }
}

role rm {
  kind = reward_model
  model = fsfairx
  retokenize = true  # a Llama-3 tokenizer: it scores the decoded text, not Qwen2's ids
  pool = reward_gpus
  replicas = 4
  dtype = bf16
  micro_batch = 16
}

data {
  train = "/data/gsm8k/train.parquet"
  val = "/data/gsm8k/test.parquet"
  batch_size = 1024
  max_prompt_length = 1024
}

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> rm.score -> scores
  responses -> actor.log_prob -> old_log_prob
  responses -> ref.log_prob -> ref_log_prob
  responses -> critic.values -> values
  scores, old_log_prob, ref_log_prob -> kl_penalty(kind = k1, coef = 0.001) -> rewards
  rewards, values -> gae(gamma = 1.0, lam = 1.0) -> advantages, returns
  values, returns -> critic.update(epochs = 1, minibatch = 256)
  old_log_prob, advantages -> actor.update(clip = 0.2, epochs = 1, minibatch = 256)
}

train { steps = 105  seed = 0  validate_every = 5  checkpoint_every = 20 }
