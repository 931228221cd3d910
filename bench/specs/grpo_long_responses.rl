rlgraph 1
# The generation-heavy GRPO step of bench/bench_vllm.py (issue 26): GRPO on the arith prompts
# with responses of up to 256 tokens whose lengths have a long tail, and a trainer that computes
# no padding. The benchmark points policy.path at a random Llama with the arith tokenizer (50
# ids), so a response ends only where EOS is sampled: ~75 tokens on average (measured), and
# in a batch of 128 samples the longest several times that. Sampling decodes until the longest is
# done, while the update (padding-free, token-budget micro-batches, one optimizer step: verl's
# use_remove_padding and use_dynamic_bsz) costs what the real tokens cost. No KL term and so no
# reference policy, as DAPO and Dr. GRPO train. That is the shape in which generation is most of
# an RL step in practice: long responses with a long tail, a cheap update.
# rollout.engine is set by the benchmark (hf and vllm).

include "../../specs/common/arith_base.rl"

data { batch_size = 16 }

role actor {
  model = policy
  pool = main
  optim { lr = 1e-4 }
  remove_padding = true
  micro_batch_tokens = 4096
}

role rollout { colocate = actor  engine = hf  n = 8  temperature = 1.0  max_new_tokens = 256 }

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses, old_log_prob
  responses -> exact -> scores
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update(clip = 0.2, epochs = 1)
}
