rlgraph 1
# Environments: a class that names no Python class, an env no generate uses, a misspelt env at the call,
# and a reply limit that could take the rollout's whole response budget (max_new_tokens).

model policy { path = "builtin:arith-gpt" }
pool main { nodes = 1  devices_per_node = 1 }

role actor { model = policy  pool = main }
role rollout { colocate = actor  n = 4  max_new_tokens = 16 }
role greedy { kind = rollout  colocate = actor  max_new_tokens = 16 }
reward exact { fn = "rlgraph.tasks.arith:exact_match" }

env calc {
  class = "rlgraph.workers.envs.calculator:Calculator"
  max_turns = 3
  max_observation_tokens = 16  # W: env-budget
}

env search {  # W: unused-env
  class = "tools.search.Search"  # E: wrong-type
}

data { train = "builtin:arith/train"  batch_size = 32 }

step {
  prompts -> rollout.generate(env = calc) -> responses
  prompts -> greedy.generate(env = cals) -> baseline  # E: unknown-env
  responses -> exact -> scores
  baseline -> exact -> baseline_scores
  responses -> actor.log_prob -> old_log_prob
  scores, baseline_scores -> remax_advantage -> advantages
  old_log_prob, advantages -> actor.update
}
