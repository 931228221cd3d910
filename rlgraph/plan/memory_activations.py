"""Working memory of one micro-batch: the activations a pass keeps and the logits it makes (docs/memory.md).

The formula follows what rlgraph's workers run (rlgraph/workers/policy.py, logits.py, activations.py): a
Llama/Qwen2-shaped decoder over `tokens` positions (micro-batch rows x their length), logits only for the
positions that predict response tokens (`logits_to_keep`), in the model's dtype, and the float32 log-softmax
work done `CHUNK_TOKENS` positions at a time. Coefficients are per token and were calibrated against measured
peaks by bench/calibrate_memory.py (the table in docs/memory.md). Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass

# Values a transformer block keeps for backward, per token: ~SAVED_H of hidden size and SAVED_I of the MLP's
# inner size (norm inputs and outputs, q/k/v and their rotary copies, attention output, the MLP's gate, up,
# activation and product). Calibrated (bench/calibrate_memory.py).
SAVED_H = 14
SAVED_I = 5
# A forward without gradients keeps nothing between blocks: its peak is one block's temporaries.
LIVE_H = 2
LIVE_I = 1
CHUNK_TOKENS = 512  # rlgraph/workers/logits.py: float32 log-softmax work, this many positions at a time
CHUNK_COPIES = 1  # float32 copies of a chunk's logits beyond the whole logits and their gradient (calibrated)


@dataclass(frozen=True)
class Pass:
    """One micro-batch of one call: `rows` sequences of `length` tokens, `scored` of them response positions."""

    rows: int
    length: int  # prompt + response tokens of the longest row
    scored: int  # response positions per row whose logits are computed

    @property
    def tokens(self) -> int:
        return self.rows * self.length


def activation_bytes(p: Pass, *, layers: int, hidden: int, intermediate: int, vocab: int | None, dtype_bytes: int,
                     backward: bool, checkpointing: bool = False, value_head: bool = False) -> dict[str, int]:
    """Bytes one pass holds at its peak, by item: `activations` and `logits` (the latter absent for a value head
    or an unknown vocabulary). `backward`: an update pass (kept for backward); else a forward without grads."""
    t, b = p.tokens, dtype_bytes
    block = t * (SAVED_H * hidden + SAVED_I * intermediate) * b  # what one block keeps for backward
    if not backward:
        activations = t * (LIVE_H * hidden + LIVE_I * intermediate) * b
    elif checkpointing:  # each block's input, and one block recomputed at a time in backward
        activations = layers * t * hidden * b + block
    else:
        activations = layers * block
    out = {"activations": activations}
    if vocab and not value_head:
        scored = p.rows * p.scored
        logits = scored * vocab * b * (2 if backward else 1)  # the logits (and their gradient, as large)
        logits += min(scored, CHUNK_TOKENS) * vocab * 4 * CHUNK_COPIES  # one chunk's float32 work
        out["logits"] = logits
    return out
