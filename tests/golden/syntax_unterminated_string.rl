rlgraph 1
# Syntax: a string without its closing quote.

model policy { path = "builtin:arith-gpt }  # E: syntax
