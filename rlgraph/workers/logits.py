"""Log-probs and entropy of response tokens from full-vocabulary logits, a chunk of positions at a time.

The float32 work on logits (the cast, the temperature, log_softmax, softmax for the entropy) makes
several copies of the whole (batch, R, vocab) tensor when done at once: ~600 KB per position each at a
152k vocabulary, ~2.5 GB per copy for a micro-batch of 8 x 512 tokens. Done here a chunk of positions at
a time, at most one chunk's float32 copies exist (the model's logits, in its own dtype, stay whole).

Backward does the same: it keeps only the logits and recomputes one chunk's float32 copies at a time,
writing that chunk's gradient into one whole-batch gradient (autograd through per-chunk slices, or
`torch.utils.checkpoint` per chunk, would hold a second whole-batch gradient while summing the slices'
zero-padded ones). Values and gradients are those of the whole-tensor formula: every operation works
per position, and the gradient comes from autograd on the same operations.
"""

from __future__ import annotations

import torch

CHUNK_TOKENS = 512  # token positions (batch x positions) per chunk: 512 x 152k vocab x 4 bytes = 311 MB a copy


def token_log_probs(
    logits: torch.Tensor,
    tokens: torch.Tensor,
    temperature: float = 1.0,
    *,
    with_entropy: bool = False,
    entropy_grad: bool = True,
    chunk_tokens: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log_softmax(logits / T)[token], entropy of softmax(logits / T) or None), both float32. (batch, R)

    `logits`: (batch, R, vocab) raw logits in any dtype, the ones that predict `tokens` (batch, R).
    `entropy_grad` False: the entropy is a metric only and carries no gradient (nor costs any backward work).
    """
    if temperature <= 0:
        raise ValueError(f"log-probs need a sampling temperature > 0, got {temperature} (greedy has no log-probs)")
    batch = tokens.shape[0]
    step = max(1, (chunk_tokens or CHUNK_TOKENS) // max(batch, 1))  # positions per chunk
    log_prob, entropy = _ChunkedLogProbs.apply(logits, tokens, temperature, with_entropy, entropy_grad, step)
    return log_prob, entropy if with_entropy else None


class _ChunkedLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, tokens, temperature, with_entropy, entropy_grad, step):
        log_probs, entropies = [], []
        for start in range(0, tokens.shape[1], step):
            part = slice(start, start + step)
            log_prob, entropy = _chunk(logits[:, part], tokens[:, part], temperature, with_entropy)
            log_probs.append(log_prob)
            entropies.append(entropy if with_entropy else log_prob[:, :0])
        log_prob, entropy = torch.cat(log_probs, dim=1), torch.cat(entropies, dim=1)  # (batch, R), (batch, R or 0)
        ctx.save_for_backward(logits, tokens)
        ctx.temperature, ctx.step = temperature, step
        ctx.entropy_grad = with_entropy and entropy_grad
        if not ctx.entropy_grad:
            ctx.mark_non_differentiable(entropy)
        return log_prob, entropy

    @staticmethod
    def backward(ctx, grad_log_prob, grad_entropy):
        logits, tokens = ctx.saved_tensors
        grad = torch.empty_like(logits)  # (batch, R, vocab): the one whole-batch tensor backward makes
        for start in range(0, tokens.shape[1], ctx.step):
            part = slice(start, start + ctx.step)
            with torch.enable_grad():
                scores = logits[:, part].detach().requires_grad_(True)
                log_prob, entropy = _chunk(scores, tokens[:, part], ctx.temperature, ctx.entropy_grad)
                total = (log_prob * grad_log_prob[:, part]).sum()
                if ctx.entropy_grad:
                    total = total + (entropy * grad_entropy[:, part]).sum()
                grad[:, part] = torch.autograd.grad(total, scores)[0]
        return grad, None, None, None, None, None


def _chunk(logits: torch.Tensor, tokens: torch.Tensor, temperature: float,
           with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    from rlgraph.algos import entropy_from_logits

    scores = logits.float()  # (batch, chunk, vocab)
    if temperature != 1.0:
        scores = scores / temperature
    log_prob = torch.log_softmax(scores, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # (batch, chunk)
    return log_prob, entropy_from_logits(scores) if with_entropy else None
