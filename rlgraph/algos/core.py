"""Masked statistics and loss aggregation shared by every estimator and loss.

Masks mark the response tokens that count (1 up to and including EOS, 0 after). Every reduction here
selects with `torch.where` rather than multiplying by the mask, so a NaN or inf sitting at a masked
position (padding, a stale value) cannot leak into a result: `nan * 0` is still `nan`.
"""

from __future__ import annotations

import torch

EPS = 1e-8

AGG_MODES = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)


def zero_masked(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`x` where the mask is set, 0 elsewhere; gradients at masked positions are exactly 0."""
    return torch.where(mask.bool(), x, torch.zeros((), dtype=x.dtype, device=x.device))


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    kept = zero_masked(x, mask)
    return kept.sum() if dim is None else kept.sum(dim)


def mask_count(mask: torch.Tensor, dtype: torch.dtype, dim: int | None = None) -> torch.Tensor:
    """Number of set mask entries, in `dtype` so that it divides without promotion."""
    m = mask.bool().to(dtype)
    return m.sum() if dim is None else m.sum(dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """sum(x * mask) / (sum(mask) + 1e-8), over everything or along `dim`."""
    return masked_sum(x, mask, dim) / (mask_count(mask, x.dtype, dim) + EPS)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of the masked-in entries; unbiased by default (Bessel's n / (n - 1))."""
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    if not unbiased:
        return var
    n = mask_count(mask, x.dtype)
    # One sync on the count; an unbiased variance of fewer than two tokens is undefined, and
    # silently returning inf would turn every whitened advantage into NaN.
    if n.item() < 2:
        raise ValueError(f"masked_var needs at least 2 masked-in entries for an unbiased variance, got {int(n.item())}")
    return var * n / (n - 1)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(x - mean) / sqrt(var + 1e-8), with mean and unbiased var taken over the masked-in entries."""
    mean = masked_mean(x, mask)
    var = masked_var(x, mask)
    return (x - mean) * torch.rsqrt(var + EPS)


def agg_loss(loss_mat: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
    """Reduce a (batch, response_len) per-token loss to a scalar.

    token-mean:              every token weighs the same (long answers weigh more).
    seq-mean-token-sum:      sum within a sequence, mean over sequences that have tokens.
    seq-mean-token-mean:     mean within a sequence, mean over sequences that have tokens.
    seq-mean-token-sum-norm: total sum / response_len, a length-independent constant (Dr. GRPO).
    """
    if mode == "token-mean":
        return masked_mean(loss_mat, mask)
    if mode == "seq-mean-token-sum":
        seq_losses = masked_sum(loss_mat, mask, dim=-1)  # (batch,)
        return masked_mean(seq_losses, mask_count(mask, loss_mat.dtype, dim=-1) > 0)
    if mode == "seq-mean-token-mean":
        seq_losses = masked_mean(loss_mat, mask, dim=-1)  # (batch,)
        return masked_mean(seq_losses, mask_count(mask, loss_mat.dtype, dim=-1) > 0)
    if mode == "seq-mean-token-sum-norm":
        return masked_sum(loss_mat, mask) / loss_mat.shape[-1]
    raise ValueError(f"unknown loss aggregation mode {mode!r}; expected one of {', '.join(AGG_MODES)}")


def agg_weight(part_mask: torch.Tensor, whole_mask: torch.Tensor, mode: str) -> float:
    """The weight of a part's `agg_loss` in the whole's: summed over the parts of a mini-batch (its
    micro-batches), weight x agg_loss(part) is agg_loss(whole), so gradient accumulation gives the
    mini-batch's gradient however the rows are split (at the whole's response width).

    token-mean:              the part's share of the loss tokens.
    seq-mean-*:              its share of the sequences that have tokens.
    seq-mean-token-sum-norm: 1 (a sum over tokens divided by a constant: the parts' losses add up).
    A whole without loss tokens weighs the parts by their rows (every loss is 0 then).
    """
    if mode == "seq-mean-token-sum-norm":
        return 1.0
    if mode == "token-mean":
        part, whole = int(part_mask.bool().sum()), int(whole_mask.bool().sum())
    elif mode in ("seq-mean-token-sum", "seq-mean-token-mean"):
        part, whole = int(part_mask.bool().any(-1).sum()), int(whole_mask.bool().any(-1).sum())
    else:
        raise ValueError(f"unknown loss aggregation mode {mode!r}; expected one of {', '.join(AGG_MODES)}")
    if whole == 0:
        return len(part_mask) / max(len(whole_mask), 1)
    return part / whole
