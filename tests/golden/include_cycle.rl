rlgraph 1
# Two files that include each other; the cycle is reported where it closes,
# in include/cycle_partner.rl.

include "include/cycle_partner.rl"

role actor { model = policy  pool = main }

role rollout { colocate = actor  n = 4 }

reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  batch_size = 8 }

step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update
}
