rlgraph 1
# Syntax: `key: value`, as in YAML.

model policy {
  path: "builtin:arith-gpt"  # E: syntax
}
