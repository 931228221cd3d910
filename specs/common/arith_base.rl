rlgraph 1
# What every arithmetic example shares: the built-in tiny GPT, one CPU device,
# the exact-match reward and the built-in two-digit addition prompts.
# Included by specs/*_arith.rl; a spec that includes it may redefine any key,
# e.g. `data { batch_size = 16 }` after the include replaces only the batch size.

model policy { path = "builtin:arith-gpt" }

pool main { nodes = 1  devices_per_node = 1  device = cpu }

reward exact { fn = "rlgraph.tasks.arith:exact_match" }

data { train = "builtin:arith/train"  val = "builtin:arith/val"  batch_size = 32 }

train { steps = 60  seed = 0  validate_every = 10  checkpoint_every = 20 }
