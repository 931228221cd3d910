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

# AdamW divides each gradient by its own running scale, so where a weight's gradients over the steps nearly
# cancel (m close to 0), a rounding-level difference in them moves that one weight by a visible part of a step
# (a 2-step SFT update at lr 5e-3 over two ranks moved 1 weight of 16,384 by 1.5e-5: beyond FP32_AFTER_UPDATE,
# within a step). A real difference (a replica's rows lost, gradients not averaged) moves most weights.
ADAM_OUTLIER_SHARE = 1e-3  # at most this share of a tensor's weights may differ beyond FP32_AFTER_UPDATE ...
ADAM_STEP_BOUND = 2.0  # ... and then by at most this many learning rates a step (AdamW's step is ~lr each)


def assert_close_after_adam(actual, expected, *, lr: float, steps: int, name: str) -> None:
    """Weights after `steps` AdamW steps at learning rate `lr`, computed in two reduction orders: all but a
    few within FP32_AFTER_UPDATE, none further than the optimizer could move them."""
    import torch

    assert actual.shape == expected.shape, name
    off = ~torch.isclose(actual, expected, **FP32_AFTER_UPDATE)
    allowed = max(1, int(ADAM_OUTLIER_SHARE * actual.numel()))
    worst = float((actual - expected).abs().max())
    assert int(off.sum()) <= allowed, f"{name}: {int(off.sum())} of {actual.numel()} weights differ (largest {worst:.3g})"
    assert worst <= ADAM_STEP_BOUND * lr * steps, f"{name}: a weight moved {worst:.3g}, beyond {steps} steps at lr {lr}"
