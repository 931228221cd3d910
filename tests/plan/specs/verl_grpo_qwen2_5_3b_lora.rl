rlgraph 1
# verl's examples/grpo_trainer/run_qwen2_5-3b_gsm8k_grpo_lora.sh as a spec: GRPO with LoRA rank 64 on
# Qwen2.5-3B-Instruct, 2 devices (80 GiB assumed: the script does not say), vLLM at tp 2 taking 0.6 of each,
# 16 prompts x 5 samples, micro-batches of 40, gradient checkpointing, the ref offloaded.

model qwen3b {
  path = "Qwen/Qwen2.5-3B-Instruct"
  params = 3.09B
  layers = 36
  hidden = 2048
  heads = 16
  kv_heads = 2
  vocab = 151936
}

pool gpus { nodes = 1  devices_per_node = 2  device = gpu  memory = 80GiB }

role actor {
  model = qwen3b
  pool = gpus
  replicas = 2
  strategy = fsdp
  dtype = bf16
  micro_batch = 40
  gradient_checkpointing = true
  lora { rank = 64  alpha = 32 }
  optim { lr = 3e-6 }
}

role rollout {
  colocate = actor
  engine = vllm
  tp = 2
  n = 5
  memory_fraction = 0.6
  max_new_tokens = 1024
  dtype = bf16
}

role ref { model = qwen3b  colocate = actor  dtype = bf16  micro_batch = 40  param_offload = true }

reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 16  max_prompt_length = 512 }

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  responses -> ref.log_prob -> ref_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages, ref_log_prob -> actor.update(minibatch = 16, kl_coef = 0.001, kl_kind = low_var_kl)
}
