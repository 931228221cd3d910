rlgraph 1
# Included by include_cycle.rl, and includes it back.

include "../include_cycle.rl"  # E: include-cycle

model policy { path = "builtin:arith-gpt" }

pool main { nodes = 1  devices_per_node = 1 }
