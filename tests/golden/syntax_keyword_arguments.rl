rlgraph 1
# Syntax: a keyword argument without `= value`.

step {
  rewards, values -> gae(gamma) -> advantages, returns  # E: syntax
}
