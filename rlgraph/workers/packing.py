"""Padding-free (packed) forward passes: a role's `remove_padding` (verl's use_remove_padding).

A micro-batch's rows hold their tokens between left padding (prompts) and right padding (responses); a
padded pass computes every pad column. Packed, the attended tokens of each row are laid end to end, several
rows to a packed row, with position ids restarting at 0 for each row and no attention mask. transformers
then reads the sequences' bounds from the position ids (masking_utils.find_packed_sequence_indices) and
builds a block-diagonal causal mask, so no token sees another row's; rotary and absolute (GPT-2) positions
are each row's own. Every result is that of the padded pass on the row's attended tokens.

The packed rows are as wide as the micro-batch's longest row, filled first-fit, longest first. One row of
all the tokens (verl's layout, made for varlen flash-attention kernels) would cost sdpa and eager attention,
which compute and mask the whole (tokens x tokens) square, more than the padded pass; at the longest row's
width, attention work and mask size never exceed the padded pass's, and the MLPs and the LM head see only
real tokens. A packed row's unused tail is a sequence of its own (positions from 0) that nothing reads.

`check_packed_attention` runs a model once on two packed sequences and refuses `remove_padding` for a model
whose attention does not separate them (a family that builds its own mask, or an attention implementation
outside transformers' mask functions), rather than mixing the rows of a batch silently.
"""

from __future__ import annotations

import contextlib
from typing import Callable

import torch


class PackedRows:
    """Where each attended token of (rows, T) padded rows sits in (bins, width) packed rows: `width` is the
    longest row's token count, rows go longest first into the first packed row with room (`first_fit`)."""

    def __init__(self, attention_mask: torch.Tensor) -> None:
        attended = attention_mask.bool()  # (rows, T)
        device = attended.device
        lengths = attended.sum(dim=1).tolist()
        width = max(1, max(lengths, default=1))
        used: list[int] = []  # tokens in each packed row so far
        start = [0] * len(lengths)  # flat index of each row's first token
        for row in sorted(range(len(lengths)), key=lambda r: -lengths[r]):  # stable: ties keep their order
            fit = first_fit(used, lengths[row], width)
            if fit == len(used):
                used.append(0)
            start[row] = fit * width + used[fit]
            used[fit] += lengths[row]
        self.shape = (max(1, len(used)), width)
        self.attended = attended
        rank = attended.long().cumsum(dim=1) - 1  # (rows, T): index of each token among its row's attended ones
        # flat packed index of every attended column; -1 elsewhere
        self.slot = torch.where(attended, torch.tensor(start, device=device)[:, None] + rank, -1)
        positions = (torch.arange(width, device=device)[None] - torch.tensor(used or [0], device=device)[:, None])
        positions = positions.reshape(-1)  # the tail of each packed row: positions from 0 (its own sequence)
        positions[self.slot[attended]] = rank[attended]
        self.position_ids = positions.view(self.shape)  # (bins, width)

    def input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(rows, T) token ids -> (bins, width); the tails hold token 0."""
        packed = input_ids.new_zeros(self.shape[0] * self.shape[1])
        packed[self.slot[self.attended]] = input_ids[self.attended]
        return packed.view(self.shape)

    def response_targets(self, prompt_length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(flat packed index of the position that predicts each response token (K,), where those tokens are
        in the (rows, R) response columns (rows, R) bool). A response token is predicted when it and the
        column before it are attended: every token of a row but its first."""
        predicting = self.slot[:, prompt_length - 1 : -1]  # (rows, R): the column before each response column
        targets = self.attended[:, prompt_length:] & (predicting >= 0)
        return predicting[targets], targets

    def last_tokens(self) -> torch.Tensor:
        """Flat packed index of each row's last attended token (rows,); a row with none: 0."""
        return self.slot.amax(dim=1).clamp(min=0)


def first_fit(used: list[int], length: int, width: int) -> int:
    """The first packed row (tokens `used` of `width`) that has room for `length` more; len(used): a new one.
    Micro-batches by token budget (workers/micro.py) count the packed rows with it, so they are these."""
    return next((b for b, u in enumerate(used) if u + length <= width), len(used))


def packed_model_inputs(packed: PackedRows, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """The keyword arguments of a packed forward pass: no attention mask and no KV cache (with either,
    transformers does not look for packed sequences and the rows would see each other), so it reads the
    sequences from the restarting position ids."""
    return {"input_ids": packed.input_ids(input_ids), "position_ids": packed.position_ids, "use_cache": False}


def packed_response_logits(module: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                           responses: torch.Tensor, *, keeps_logits: bool
                           ) -> tuple[torch.Tensor, torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
    """(logits (1, K, vocab), the tokens they predict (1, K), unpack: (1, K, ...) -> (rows, R, ...) at the response
    columns, 0 where nothing is predicted) of one packed pass of a causal LM over padded rows.

    Only the K predicting positions go through the LM head, when `keeps_logits` (`_lm_head_sees_only`); the
    model returns them in packed order, so tokens are taken in that order too and the (K,) results are put back
    in row order, where the logits are never copied.
    """
    packed = PackedRows(attention_mask)
    positions, targets = packed.response_targets(attention_mask.shape[1] - responses.shape[1])
    order = positions.argsort()  # packed order of the K predicting positions
    kwargs = packed_model_inputs(packed, input_ids)
    if keeps_logits:
        keep = torch.zeros(packed.shape[0] * packed.shape[1], dtype=torch.bool, device=positions.device)
        keep[positions] = True
        with _lm_head_sees_only(module, keep.view(packed.shape)):
            logits = module(**kwargs).logits  # (1, K, vocab), packed order
    else:
        logits = module(**kwargs).logits.flatten(0, 1)[positions[order]]
    tokens = responses[targets][order]  # (K,) packed order
    back = order.argsort()  # row order -> packed order

    def unpack(x: torch.Tensor) -> torch.Tensor:  # (1, K, ...) -> (rows, R, ...): per-position trailing dims too
        where = targets.view(*targets.shape, *(1,) * (x.dim() - 2))
        return torch.zeros(*targets.shape, *x.shape[2:], dtype=x.dtype, device=x.device).masked_scatter(where,
                                                                                                          x[0, back])

    return logits.reshape(1, -1, logits.shape[-1]), tokens[None], unpack


@contextlib.contextmanager
def _lm_head_sees_only(module: torch.nn.Module, keep: torch.Tensor):
    """The LM head computes logits for the `keep` positions ((bins, width) mask) only, as (1, K, vocab) in packed
    order. `logits_to_keep` takes a 1-D index of columns, the same for every bin (a 2-D mask only in some
    transformers versions), so the head's input is narrowed instead: whatever the model does after its head
    (soft-capping, a logit scale) still applies."""
    head = module.get_output_embeddings()
    handle = head.register_forward_pre_hook(lambda _head, args: (args[0][keep][None], *args[1:]))
    try:
        yield
    finally:
        handle.remove()


def scatter_rows(values: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(K,) values in row order -> (rows, R) at `targets`, 0 elsewhere (with grad)."""
    return torch.zeros(targets.shape, dtype=values.dtype, device=values.device).masked_scatter(targets, values)


def check_packed_attention(module: torch.nn.Module, output: str, device: torch.device | str) -> None:
    """Raise ValueError unless a packed pass of `module` (a causal LM, or a backbone) keeps its sequences apart.

    `module(input_ids=, position_ids=, use_cache=False).<output>` ("logits", "last_hidden_state") gives the
    (1, T, ...) per-token outputs with no attention mask. Sequence b after sequence a must give what b gives at
    the start of a row (before c): a leak across the bound, or positions taken from the column instead of the
    position ids (absolute embeddings), changes it. Every worker with `remove_padding` calls it once, at start.
    """
    model, vocab_size = model_name(module), module.config.vocab_size

    def forward(ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return getattr(module(input_ids=ids, position_ids=positions, use_cache=False), output)

    length = 8
    generator = torch.Generator().manual_seed(0)
    a, b, c = (torch.randint(3, max(4, vocab_size), (length,), generator=generator) for _ in range(3))
    positions = torch.arange(length).repeat(2)[None].to(device)
    try:
        with torch.no_grad():
            after = forward(torch.cat([a, b])[None].to(device), positions)[0, length:].float()
            first = forward(torch.cat([b, c])[None].to(device), positions)[0, :length].float()
    except TypeError as error:  # a forward without position_ids
        raise ValueError(f"remove_padding: {model} cannot run packed rows ({error}); set remove_padding = false "
                         "for this role") from None
    change = (after - first).abs().mean() / first.abs().mean().clamp(min=1e-12)
    if not change <= 1e-2:  # the same sums in the same order: ~1e-7 in fp32, ~1e-3 in bf16; a leak: ~1e-1
        raise ValueError(f"remove_padding: {model} does not keep packed sequences apart (a sequence's outputs "
                         f"change by {float(change):.1%} with another before it in the row): it does not read the "
                         "sequences' bounds from restarting position ids (transformers' block-diagonal mask); set "
                         "remove_padding = false for this role")


def model_name(module: torch.nn.Module) -> str:
    config = getattr(module, "config", None)
    attn = getattr(config, "_attn_implementation", None)
    return f"{type(module).__name__}" + (f" (attn_implementation={attn})" if attn else "")
