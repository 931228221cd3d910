rlgraph 1
# A 0.5B policy whose micro-batch of 16 samples does not fit one 24 GiB device when they are all of full length:
# `plan --fit` replaces it with a token budget (verl's use_dynamic_bsz) that fits whatever the lengths.

model qwen {
  path = "Qwen/Qwen2.5-0.5B"  # hub id: sizes below
  params = 0.5B
  layers = 24
  hidden = 896
  heads = 14
  kv_heads = 2
  vocab = 151936
}

pool gpu { nodes = 1  devices_per_node = 1  device = gpu  memory = 24GiB }

role actor {
  model = qwen
  pool = gpu
  dtype = bf16
  micro_batch = 16  # verl: ppo_micro_batch_size_per_gpu
  optim { lr = 1e-6 }
}

role rollout { colocate = actor  engine = hf  n = 4  max_new_tokens = 2048  dtype = bf16 }

reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 64  max_prompt_length = 1024 }

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update(minibatch = 64)
}
