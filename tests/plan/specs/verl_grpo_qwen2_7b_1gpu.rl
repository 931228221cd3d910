rlgraph 1
# A 7B policy on one 80 GiB device: verl's examples/grpo_trainer/run_qwen2-7b.sh (GRPO, Qwen2-7B-Instruct,
# vLLM at 0.6) with trainer.n_gpus_per_node=1. Does not fit: the actor's weights, gradients and AdamW state alone
# are 16 bytes a parameter, 113 GiB.

model qwen {
  path = "Qwen/Qwen2-7B-Instruct"
  params = 7.6B
  layers = 28
  hidden = 3584
  heads = 28
  kv_heads = 4
  vocab = 152064
}

pool gpu { nodes = 1  devices_per_node = 1  device = gpu  memory = 80GiB }

role actor {
  model = qwen
  pool = gpu
  strategy = fsdp
  dtype = bf16
  micro_batch = 16
  gradient_checkpointing = true
  optim { lr = 1e-6 }
}

role rollout {
  colocate = actor
  engine = vllm
  n = 5
  memory_fraction = 0.6
  max_new_tokens = 1024
  dtype = bf16
}

role ref { model = qwen  colocate = actor  dtype = bf16  micro_batch = 16 }

reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 32  max_prompt_length = 512 }

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  responses -> ref.log_prob -> ref_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages, ref_log_prob -> actor.update(minibatch = 32, kl_coef = 0.001, kl_kind = low_var_kl)
}
