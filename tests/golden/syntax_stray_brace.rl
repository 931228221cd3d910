rlgraph 1
# Syntax: one `}` too many.

pool main { nodes = 1  devices_per_node = 1 }
}  # E: syntax
