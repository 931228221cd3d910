# ARGS: -s train.steps=abc -s trian.seed=1 -s data.batch_size -s actor.optim.lr=[1e-4
# E <override 1>: wrong-type
# E <override 2>: bad-override
# E <override 3>: bad-override
# E <override 4>: bad-override
rlgraph 1
# Bad `-s` overrides: a value of the wrong type, a misspelled block, no `=`, a value that does not parse.

model policy { path = "builtin:arith-gpt" }

pool main { nodes = 1  devices_per_node = 1 }

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
