rlgraph 1  # E: missing-block
# Roles and data, but no step: nothing says what one training step does.

model policy { path = "builtin:arith-gpt" }
pool main { nodes = 1  devices_per_node = 1 }

role actor { model = policy  pool = main }
role rollout { colocate = actor  n = 4 }

data { train = "builtin:arith/train"  batch_size = 32 }
