rlgraph 1
# base.rl with its actor in bf16 here; the micro-batch it sets does not fit.

include "base.rl"

role actor {
  dtype = bf16  # as in base.rl
}
