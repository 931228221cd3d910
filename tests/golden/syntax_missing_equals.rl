rlgraph 1
# Syntax: a key without `=`.

model policy { path = "builtin:arith-gpt" }

pool main { nodes 1  devices_per_node = 1 }  # E: syntax
