rlgraph 1
# Syntax: a dataflow line with no call between two arrows.

step {
  prompts -> rollout.generate -> responses
  responses -> -> scores  # E: syntax
}
