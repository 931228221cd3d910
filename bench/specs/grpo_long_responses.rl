rlgraph 1
# The generation-heavy GRPO step of bench/bench_vllm.py (issue 26): specs/grpo_arith.rl
# with responses of up to 128 tokens, few prompts per step (4 x 8 = 32 samples) and one
# optimizer step per update, so that sampling 32 x 128 tokens one at a time is most of
# the step and the ref's pass and the update (one batched pass each) the rest. The
# benchmark points policy.path at a random Llama whose vocabulary is 2,048 ids, so a
# response ends early only where EOS (1 id in 2,048) is sampled: most run 128 tokens.
# rollout.engine is set by the benchmark (hf and vllm).

include "../../specs/common/arith_base.rl"

data { batch_size = 4 }

role actor {
  model = policy
  pool = main
  optim { lr = 1e-4 }
}

role rollout { colocate = actor  engine = hf  n = 8  temperature = 1.0  max_new_tokens = 128 }

role ref { model = policy  colocate = actor }

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses, old_log_prob
  responses -> exact -> scores
  responses -> ref.log_prob -> ref_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages, ref_log_prob -> actor.update(clip = 0.2, epochs = 1, kl_coef = 0.001, kl_kind = low_var_kl)
}
