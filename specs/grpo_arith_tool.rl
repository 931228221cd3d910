rlgraph 1
# GRPO with a calculator tool: two-digit multiplication, which the tiny built-in
# model cannot do in its head but can do by calling `calc` and copying the
# answer. Each sample is an episode of up to three model turns: the model writes
# `<tool_call>calc 37*48</tool_call>`, the environment answers
# `<tool_response>1776</tool_response>` (inserted as token ids, attended to but
# never trained on), and the model answers. The base model calls the tool only
# sometimes and sometimes miscopies the numbers; the reward (exact match of the
# final answer) teaches it to call the tool, correctly, every time.

model policy { path = "builtin:arith-tool-gpt" }

pool main { nodes = 1  devices_per_node = 1  device = cpu }

env calc {
  class = "rlgraph.workers.envs.calculator:Calculator"
  max_turns = 3
  max_observation_tokens = 16
  timeout_s = 10
  workers = 2
}

reward exact { fn = "rlgraph.tasks.arith_tool:exact_match" }

data { train = "builtin:arith-tool/train"  val = "builtin:arith-tool/val"  batch_size = 32 }

train { steps = 60  seed = 0  validate_every = 10  checkpoint_every = 20 }

role actor {
  model = policy
  pool = main
  optim { lr = 2e-4 }
}

role rollout { colocate = actor  engine = hf  n = 8  temperature = 1.0  max_new_tokens = 32 }

role ref { model = policy  colocate = actor }

step {
  sync actor -> rollout
  prompts -> rollout.generate(env = calc) -> responses, old_log_prob
  responses -> exact -> scores
  responses -> ref.log_prob -> ref_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages, ref_log_prob -> actor.update(clip = 0.2, epochs = 1, minibatch = 16, kl_coef = 0.001, kl_kind = low_var_kl)
}
