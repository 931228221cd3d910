"""Working memory of one micro-batch: the activations a pass keeps and the logits it makes (docs/memory.md).

The formula follows what rlgraph's workers run (rlgraph/workers/policy.py, logits.py, activations.py): a
Llama/Qwen2-shaped decoder over `tokens` positions (micro-batch rows x their length), logits only for the
positions that predict response tokens (`logits_to_keep`), in the model's dtype, and the float32 log-softmax
work done `CHUNK_TOKENS` positions at a time. What a block keeps for backward was counted with autograd's
saved-tensor hooks; the peaks were measured by bench/calibrate_memory.py (the table in docs/memory.md).
Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass

# What one transformer block keeps for backward, per token (counted with torch's saved-tensor hooks on HF's
# Llama and Qwen2 blocks, SDPA attention; exact for every shape measured): 8 h + 4 i + 2 kv values in the
# model's dtype (the two RMSNorms' inputs and outputs, q and k after rotary, v, attention's output and its
# reshaped copy, the MLP's gate, activation, up and product), one float32 log-sum-exp per head (attention
# keeps no L x L scores) and one float32 inverse RMS per norm. HF's RMSNorm computes in float32: in bf16 it
# keeps a float32 copy of its input, 2 h bytes a norm more than fp32 would.
SAVED_H, SAVED_I, SAVED_KV = 8, 4, 2
OUTSIDE_H = 3  # outside the blocks: the embeddings' output, the final norm's input and output, per token
# A forward without gradients keeps nothing between blocks: its peak is one block's temporaries (calibrated).
LIVE_H = 2
LIVE_I = 1
CHUNK_TOKENS = 512  # rlgraph/workers/logits.py: float32 log-softmax work, this many positions at a time
# Backward holds two copies of the logits at once: the logits and their gradient (as large); then, once the
# logits are freed, that gradient and the one of the R + 1 positions the LM head computed, which the slice to
# R positions makes when it passes its gradient back.
BACKWARD_LOGIT_COPIES = 2


@dataclass(frozen=True)
class Pass:
    """One micro-batch of one call: `rows` sequences of `length` tokens, `scored` of them response positions,
    on one device of a group of `split` that share each sequence (Ulysses sequence parallelism: each device
    runs 1/split of every row's tokens through the blocks, and its logits are those of its slice)."""

    rows: int
    length: int  # prompt + response tokens of the longest row
    scored: int  # response positions per row whose logits are computed
    split: int = 1  # devices sharing each sequence (`sequence_parallel`)

    @property
    def tokens(self) -> int:
        """Token positions on this device."""
        return -(-self.rows * self.length // self.split)

    @property
    def scored_tokens(self) -> int:
        """Response positions whose logits this device computes."""
        return -(-self.rows * self.scored // self.split)


def block_bytes_per_token(*, hidden: int, intermediate: int, kv: int, heads: int, dtype_bytes: int) -> int:
    """Bytes one transformer block keeps for backward, per token."""
    b = dtype_bytes
    return (b * (SAVED_H * hidden + SAVED_I * intermediate + SAVED_KV * kv) + (4 - b) * 2 * hidden
            + 4 * (heads + 2))


def activation_bytes(p: Pass, *, layers: int, hidden: int, intermediate: int, vocab: int | None, dtype_bytes: int,
                     backward: bool, checkpointing: bool = False, value_head: bool = False, kv: int | None = None,
                     heads: int | None = None) -> dict[str, int]:
    """Bytes one pass holds at its peak, by item: `activations` and `logits` (the latter absent for a value head
    or an unknown vocabulary). `backward`: an update pass (kept for backward); else a forward without grads.
    `kv`: key/value heads x head_dim (default: hidden, no grouped-query attention); `heads`: attention heads."""
    t, b = p.tokens, dtype_bytes
    kv = hidden if kv is None else kv
    heads = heads or max(1, hidden // 128)
    block = t * block_bytes_per_token(hidden=hidden, intermediate=intermediate, kv=kv, heads=heads, dtype_bytes=b)
    outside = t * OUTSIDE_H * hidden * b
    logits = 0
    if vocab and not value_head:
        scored = p.scored_tokens
        logits = scored * vocab * b * (BACKWARD_LOGIT_COPIES if backward else 1)
        logits += min(scored, CHUNK_TOKENS) * vocab * 4  # one chunk's float32 work
    if not backward:
        activations = t * (LIVE_H * hidden + LIVE_I * intermediate) * b
    elif checkpointing:
        # each block's input; backward recomputes one block at a time, after the logits' backward has freed
        # them: the recomputed block counts only by what it exceeds the logits
        activations = layers * t * hidden * b + outside + max(block - logits, 0)
    else:
        activations = layers * block + outside
    out = {"activations": activations}
    if vocab and not value_head:
        out["logits"] = logits
    return out


def backward_peak(items: dict[str, int], *, grads: int, head_grads: int, accumulated: bool,
                  tied: bool = False) -> dict[str, int]:
    """An update's items with its gradients, as its peak holds them.

    Backward allocates the blocks' gradients as it frees the blocks' activations, so with no gradients before
    it (the first micro-batch after an optimizer step, which sets them to None) its peak is the larger of its
    start (activations, logits, the LM head's gradients `head_grads`) and its end (all `grads`), not their sum.
    The items keep `grads` whole and count the activations and logits beyond what the gradients replace.
    `accumulated`: an earlier micro-batch's gradients are there already (several micro-batches a step).
    `tied`: embeddings tied to the LM head; at the end the embeddings' dense gradient is added to the head's,
    two more tensors of its size at once (measured: bench/calibrate_memory.py, qwen2-0.5b)."""
    if accumulated or "activations" not in items:
        return {"grads": grads, **items}
    replaced = max(grads - head_grads, 0)  # gradients allocated after the logits and as the activations go
    activations = items["activations"]
    out = {"grads": grads, "activations": max(activations - replaced, 0)}
    if "logits" in items:
        out["logits"] = max(items["logits"] - max(replaced - activations, 0), 0)
    end = 2 * head_grads if tied else 0  # beyond `grads`, at the end of backward
    if end > sum(out.values()) - grads:
        out = {"grads": grads, "tied_embedding_grads": end, **{k: 0 for k in out if k != "grads"}}
    return out
