"""The suite's float tolerances, written once. They follow the dtype and the arithmetic between the two sides of a
comparison, never a machine: both sides are computed in the same test, on the same machine.

Two float32 computations of the same math that add up in a different order (micro-batches, chunks, packed rows,
another batch shape, two data-parallel ranks) agree only to the rounding of those sums: float32's epsilon is
1.2e-7 and the sums here run over up to ~10^3 terms, so results differ by ~1e-6 relative, and by a few 1e-6 near
zero, with no bug (TIS weights after micro-batching differed by 1.7e-6 on another CPU). A bug moves them by far
more. Weights after an optimizer step carry that rounding through AdamW's division by sqrt(v), where a gradient
near zero turns a tiny difference into a larger relative one.
"""

FP32_REORDERED = {"rtol": 1e-5, "atol": 1e-5}  # the same float32 math summed in another order
FP32_AFTER_UPDATE = {"rtol": 1e-4, "atol": 1e-5}  # weights after AdamW steps of such results
