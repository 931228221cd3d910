"""Micro-batches: the rows of one forward (and backward) pass, by a sample count or by a token budget.

`micro_batch` (samples) takes the rows in order, and each pass runs at the whole batch's width: its
longest prompt plus its longest response. `micro_batch_tokens` (verl's use_dynamic_bsz with
*_max_token_len_per_gpu) sorts the rows by their true length (prompt + response tokens), fills each pass
greedily while rows x its longest row stays within the budget, and runs each pass right-aligned and cut to
its own longest row (`pack`), so the padding of the batch's longest prompt and response is not computed.
The budget bounds the tensor a pass runs on, the little padding left between rows of similar length
included; a role's `remove_padding` packs the rows without it (workers/packing.py).

Results go back to each row's place in the batch; the columns past a row's end hold 0. The passes are a
pure function of the rows' lengths and order, so a step and its resume make the same ones.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from rlgraph.workers.batch import Rollout, TokenSource, last_index
from rlgraph.workers.packing import first_fit


def row_lengths(rollout: Rollout) -> tuple[torch.Tensor, torch.Tensor]:
    """(prompt tokens, response columns up to the last attended one) of each row. (batch,), (batch,) long, CPU"""
    prompt = rollout.attention_mask[:, : rollout.prompt_length].sum(dim=1)  # left-padded: the last `prompt` columns
    attended = rollout.token_source != TokenSource.PAD  # (batch, R)
    response = torch.where(attended.any(dim=1), last_index(attended) + 1, 0)
    return prompt.cpu(), response.cpu()


def token_budget_micro_batches(rows: torch.Tensor, prompt: torch.Tensor, response: torch.Tensor,
                               budget: int, *, packed: bool = False) -> list[torch.Tensor]:
    """`rows` in micro-batches of at most `budget` tokens, counted as rows x its longest row (prompt + response),
    or, `packed` (remove_padding), as the packed rows the pass runs on (workers/packing.py: rows laid end to
    end in rows as wide as the longest, first-fit): its tokens and the few left at the packed rows' ends.

    Longest rows first (a pass of the peak size comes first, so memory fails early if it fails at all); ties
    keep their order in `rows`. A row longer than the budget alone is a pass of its own (`rlgraph check`
    refuses a budget below max_prompt_length + max_new_tokens; multi-turn responses may still exceed it).
    `prompt`, `response`: lengths of every row of the rollout (`row_lengths`), indexed by `rows`.
    """
    ids = rows.tolist()
    total = (prompt + response).tolist()
    order = sorted(ids, key=lambda row: -total[row])  # stable: ties keep their order in `rows`
    batches: list[list[int]] = []
    bins: list[int] = []  # packed: tokens in each packed row of the last pass
    for row in order:
        if batches:
            width = total[batches[-1][0]]  # sorted longest first: a pass is as wide as its first row
            if packed:
                fit = first_fit(bins, total[row], width)
                fits = max(len(bins), fit + 1) * width <= budget
            else:
                fits = (len(batches[-1]) + 1) * width <= budget
            if fits:
                batches[-1].append(row)
                if packed:
                    bins += [0] * (fit == len(bins))
                    bins[fit] += total[row]
                continue
        batches.append([row])
        bins = [total[row]]
    return [torch.tensor(b, dtype=torch.long) for b in batches]


def split_rows(rollout: Rollout, rows: torch.Tensor, micro_batch: int | None,
               micro_batch_tokens: int | None, *, packed: bool = False) -> list[torch.Tensor]:
    """The micro-batches of `rows` (indices into `rollout`): by `micro_batch_tokens` if set (`packed`: a pass
    counts the packed rows it runs on), else `micro_batch` rows each in order (None: all of them in one pass)."""
    if micro_batch_tokens:
        prompt, response = row_lengths(rollout)
        return token_budget_micro_batches(rows, prompt, response, micro_batch_tokens, packed=packed)
    return list(rows.split(micro_batch or len(rows) or 1))


def pack(rollout: Rollout) -> tuple[Rollout, Callable[[torch.Tensor], torch.Tensor]]:
    """The rows right-aligned and cut to their longest row, and the map of a result back to the rows' layout.

    A row's attended tokens (its prompt, then its response up to the last attended column) are contiguous;
    here every row ends at the last column, so the pass is as wide as its longest row (prompt + response),
    where left-aligned responses would make it its longest prompt plus its longest response. Position ids are
    the rows' own (they count attended tokens only), so a forward pass gives the same values on every
    attended position. The packed rollout's last R' columns (`responses`, R' = the longest response) hold
    each row's response at its right end, and `loss_mask`/`token_source` follow it: `response_logits` and a
    critic read it as they read any rollout. Only forward passes read it (its halves are not a prompt and a
    response). unpack: (rows, R') in that layout -> (rows, R) at the rollout's columns, 0 past a row's end.
    """
    device = rollout.input_ids.device
    prompt, response = (lengths.to(device) for lengths in row_lengths(rollout))
    p, r = rollout.prompt_length, rollout.response_length
    width = int((prompt + response).max()) if len(prompt) else 1
    longest = max(1, int(response.max())) if len(response) else 1
    # packed column k of row i holds the row's column p + response_i - width + k; before its first token: padding
    columns = (p + response - width)[:, None] + torch.arange(width, device=device)[None]  # (rows, width)
    attended = columns >= (p - prompt)[:, None]
    columns = columns.clamp(0, p + r - 1)
    input_ids = torch.where(attended, rollout.input_ids.gather(1, columns), rollout.pad_token_id)
    position_ids = torch.where(attended, rollout.position_ids.gather(1, columns), 0)
    # packed response column c of row i is the row's response column response_i - longest + c (< 0: its prompt)
    sources = (response - longest)[:, None] + torch.arange(longest, device=device)[None]  # (rows, R')
    in_response, sources = sources >= 0, sources.clamp(0, r - 1)
    packed = dataclasses.replace(
        rollout,
        prompts=input_ids[:, : width - longest],
        responses=input_ids[:, width - longest:],
        input_ids=input_ids,
        attention_mask=attended.long(),
        position_ids=position_ids,
        loss_mask=torch.where(in_response, rollout.loss_mask.gather(1, sources), 0),
        token_source=torch.where(in_response, rollout.token_source.gather(1, sources), 0).to(torch.int8),
        sample_log_probs=None,
    )
    # response column j of row i sits at packed response column longest - response_i + j
    back = ((longest - response)[:, None] + torch.arange(r, device=device)[None]).clamp(max=longest - 1)  # (rows, R)
    kept = torch.arange(r, device=device)[None] < response[:, None]

    def unpack(x: torch.Tensor) -> torch.Tensor:  # (rows, R', ...) -> (rows, R, ...): per-position trailing dims too
        trailing = (1,) * (x.dim() - 2)
        index = back.view(*back.shape, *trailing).expand(*back.shape, *x.shape[2:])
        return torch.where(kept.view(*kept.shape, *trailing), x.gather(1, index),
                           torch.zeros((), dtype=x.dtype, device=x.device))

    return packed, unpack


def forward_pass(rollout: Rollout, rows: torch.Tensor, *,
                 cut: bool) -> tuple[Rollout, Callable[[torch.Tensor], torch.Tensor]]:
    """The rows of one pass, and the map of a (rows, R') result back to (rows, R): packed (`pack`) when the
    passes are formed by a token budget, else as they are (the map is then the identity)."""
    part = rollout.select(rows)
    return pack(part) if cut else (part, _same)


def _same(x: torch.Tensor) -> torch.Tensor:
    return x
