rlgraph 1
# GRPO on two-digit addition, as specs/grpo_arith.rl, with LoRA: only rank-16 adapters on every linear
# layer of the actor train (peft), the base weights stay frozen. The reference policy is the actor's base
# with its adapters off (no second copy of the weights), and the rollout generates with the adapters on,
# in place. Adapters learn with a larger learning rate than full fine-tuning.

include "common/arith_base.rl"

role actor {
  model = policy
  pool = main
  optim { lr = 1e-3 }
  lora { rank = 16  alpha = 32  target_modules = "all-linear" }
}

role rollout { colocate = actor  engine = hf  n = 8  temperature = 1.0  max_new_tokens = 4 }

role ref { model = policy  colocate = actor }

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses, old_log_prob
  responses -> exact -> scores
  responses -> ref.log_prob -> ref_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages, ref_log_prob -> actor.update(clip = 0.2, epochs = 1, minibatch = 16, kl_coef = 0.001, kl_kind = low_var_kl)
}
