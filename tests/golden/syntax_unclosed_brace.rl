rlgraph 1
# Syntax: a block without its `}`; the error points at the `{` that is never closed.

model policy { path = "builtin:arith-gpt" }

role actor {  # E: syntax
  model = policy
  pool = main

pool main { nodes = 1  devices_per_node = 1 }
