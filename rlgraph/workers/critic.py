"""The critic: the LM's transformer body with a scalar value head, trained on the returns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rlgraph.contract.settings import CriticSettings, CriticUpdateSettings, ForwardSettings
from rlgraph.workers.activations import checkpoint_blocks
from rlgraph.workers.batch import Rollout
from rlgraph.workers.micro import pack, split_rows
from rlgraph.workers.optim import Optimization, shuffle_generator
from rlgraph.workers.packing import (PackedRows, check_packed_attention, packed_model_inputs,
                                     scatter_rows)
from rlgraph.workers.loading import default_device
from rlgraph.workers.precision import Precision

VALUE_HEAD_FILE = "value_head.safetensors"


class CriticWorker:
    """V(prompt, response_<t) for every response token t, from the hidden state before that token.

    The body is loaded with `AutoModel` from a causal-LM folder (the LM head is dropped); the value
    head starts at zero, so the first values are 0 and the first advantages are plain returns. A folder
    written by `save` holds the body and `value_head.safetensors`, and loads back with the trained head.
    """

    def __init__(self, model_path: str, settings: CriticSettings, *, seed: int,
                 device: str | torch.device | None = None) -> None:
        from transformers import AutoModel

        from rlgraph.models import resolve_model_path
        from rlgraph.workers import fsdp

        self.device = default_device(device)
        self.settings = settings
        self.strategy = settings.strategy  # "fsdp": `shard()` once the data-parallel group is up
        self.sharded = False
        # bf16: fp32 master weights here, bf16 compute in the body's forward passes (workers/precision.py)
        self.precision = Precision.for_role(settings.dtype, trained=True, role="critic")
        path = resolve_model_path(model_path)
        if fsdp.will_shard(self.strategy):  # on the meta device; rank 0 alone reads the weights, `shard()` fills it
            self.backbone = fsdp.empty_pretrained(AutoModel, path, self.precision.param_dtype, self.device)
        else:
            self.backbone = AutoModel.from_pretrained(path, dtype=self.precision.param_dtype).to(self.device)
        self.backbone.eval()  # no dropout: values at rollout time and in the update must agree
        if settings.gradient_checkpointing:
            checkpoint_blocks(self.backbone)  # HF's own checkpointing would not engage in eval mode
        self.value_head = torch.nn.Linear(self.backbone.config.hidden_size, 1).to(self.device)
        torch.nn.init.zeros_(self.value_head.weight)
        torch.nn.init.zeros_(self.value_head.bias)
        head_file = Path(path) / VALUE_HEAD_FILE
        if head_file.is_file():
            self.load_value_head(head_file)
        self.tokenizer = _maybe_tokenizer(path)
        if not fsdp.will_shard(self.strategy):  # sharded: once the shards are in place (`shard`)
            self._check_packing()
        self.shuffle_generator = torch.Generator().manual_seed(seed)
        self.optim = Optimization.from_settings(
            list(self.backbone.parameters()) + list(self.value_head.parameters()), settings.optim,
            offload_state=settings.optimizer_offload)

    def shard(self) -> None:
        """strategy = fsdp: shard body and head over the data-parallel group (see workers/fsdp.py)."""
        from rlgraph.workers import fsdp

        # param_offload: FSDP2's CPU offload policy (workers/offload.py)
        offload_to = self.device if self.settings.param_offload else None
        fsdp.shard(self.backbone, mp_policy=self.precision.fsdp_policy(), offload_to=offload_to)
        fsdp.shard(self.value_head, offload_to=offload_to)  # the head stays fp32, as in `predict`
        self.sharded = True
        self._check_packing()
        self.optim.set_params(self._both().parameters())

    def _check_packing(self) -> None:
        """remove_padding: refuse a model whose attention would mix packed rows (workers/packing.py)."""
        if self.settings.remove_padding:
            check_packed_attention(self.backbone, "last_hidden_state", self.device)

    def _both(self) -> torch.nn.Module:
        # one module over body and head, for the distributed-checkpoint helpers (parameter names as in state_dict)
        return torch.nn.ModuleDict({"backbone": self.backbone, "value_head": self.value_head})

    def predict(self, rollout: Rollout, *, cut: bool = False) -> torch.Tensor:
        """Values before each response token, with grad; 0 off the loss mask. (batch, R)

        cut: run the model on the rows right-aligned and cut to their longest row (workers/micro.py `pack`); the
        values are the same. The role's remove_padding: packed rows (workers/packing.py), the same values again."""
        rollout = rollout.to(self.device)
        if self.settings.remove_padding:  # workers/packing.py: rows end to end, no padding computed
            packed = PackedRows(rollout.attention_mask)
            positions, targets = packed.response_targets(rollout.prompt_length)  # (K,), (batch, R)
            with self.precision.compute(self.device, sharded=self.sharded):
                hidden = self.backbone(**packed_model_inputs(packed, rollout.input_ids)).last_hidden_state
            values = self.value_head(hidden.flatten(0, 1)[positions].float()).squeeze(-1)  # (K,)
            return scatter_rows(values, targets) * rollout.loss_mask
        rollout, unpack = pack(rollout) if cut else (rollout, None)
        with self.precision.compute(self.device, sharded=self.sharded):
            hidden = self.backbone(
                input_ids=rollout.input_ids,
                attention_mask=rollout.attention_mask,
                position_ids=rollout.position_ids,
                use_cache=False,
            ).last_hidden_state  # (batch, P + R, hidden)
        hidden = hidden[:, -rollout.response_length - 1 : -1].float()  # (batch, R, hidden)
        # The head in fp32: one small matmul, and bf16 would round the values (regression targets) to 3 digits.
        values = self.value_head(hidden).squeeze(-1)  # (batch, R)
        values = values * rollout.loss_mask
        return unpack(values) if unpack is not None else values

    @torch.no_grad()
    def values(self, rollout: Rollout, *, settings: ForwardSettings) -> torch.Tensor:
        """Values of the states the response tokens were sampled in, float32, on the CPU. (batch, R)"""
        values = torch.zeros(rollout.responses.shape)  # (batch, R)
        cut = bool(settings.micro_batch_tokens)
        for rows in split_rows(rollout, torch.arange(len(rollout)), settings.micro_batch, settings.micro_batch_tokens,
                               packed=self.settings.remove_padding):
            values[rows] = self.predict(rollout.select(rows), cut=cut).cpu()
        return values

    def update(
        self,
        rollout: Rollout,
        values: torch.Tensor,
        returns: torch.Tensor,
        *,
        settings: CriticUpdateSettings,
        shuffle_seed: int | None = None,
        shuffle: bool = True,
    ) -> dict[str, float]:
        """One training step of the clipped value loss (`settings.mini_batch_size` and `micro_batch` count samples)."""
        from rlgraph.algos import masked_mean, value_loss
        from rlgraph.algos.core import agg_weight

        rollout = rollout.to(self.device)
        values, returns = values.to(self.device), returns.to(self.device)

        cut = bool(settings.micro_batch_tokens)

        def micro_batch_loss(rows: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
            part = rollout.select(rows)
            vpreds = self.predict(part, cut=cut)  # (micro, R)
            vf_loss, metrics = value_loss(
                vpreds, returns[rows], values[rows], part.loss_mask, clip=settings.clip, agg=settings.loss_agg
            )
            metrics["critic/vf_loss"] = vf_loss.item()
            metrics["critic/vpred_mean"] = masked_mean(vpreds.detach(), part.loss_mask).item()
            return vf_loss, metrics

        metrics = self.optim.run_epochs(
            len(rollout),
            micro_batch_loss,
            epochs=settings.epochs,
            mini_batch_size=settings.mini_batch_size,
            micro_batch_size=settings.micro_batch,
            generator=shuffle_generator(shuffle_seed, self.shuffle_generator, shuffle),
            split=lambda mini: split_rows(rollout, mini, settings.micro_batch, settings.micro_batch_tokens,
                                          packed=self.settings.remove_padding),
            weight=lambda micro, mini: agg_weight(rollout.loss_mask[micro], rollout.loss_mask[mini],
                                                  settings.loss_agg),
        )
        metrics["critic/grad_norm"] = metrics.pop("grad_norm")
        metrics["critic/lr"] = metrics.pop("lr")
        metrics["critic/skipped_update_frac"] = metrics.pop("skipped_update_frac")
        return metrics

    # --- weights and checkpoints ---

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Body weights under their own names, head weights under `value_head.`; CPU copies.

        Sharded, every rank must call it; rank 0 gets the gathered weights, the others {}."""
        body, head = self._weights()
        return {**body, **{f"value_head.{k}": v for k, v in head.items()}}

    def _weights(self) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """(body, head) as CPU copies; sharded: gathered onto rank 0 ({} elsewhere), every rank calls it."""
        from rlgraph.workers import fsdp

        if self.sharded:
            return fsdp.full_state_dict(self.backbone), fsdp.full_state_dict(self.value_head)
        return tuple({name: t.detach().to("cpu", copy=True) for name, t in module.state_dict().items()}
                     for module in (self.backbone, self.value_head))

    def load_state_dict(self, state_dict: dict[str, torch.Tensor]) -> None:
        head = {k.removeprefix("value_head."): v for k, v in state_dict.items() if k.startswith("value_head.")}
        body = {k: v for k, v in state_dict.items() if not k.startswith("value_head.")}
        self.backbone.load_state_dict(body)
        self.value_head.load_state_dict(head)

    def save(self, directory: str | Path) -> None:
        """The body as an HF folder plus `value_head.safetensors`; sharded, every rank calls it and rank 0 writes."""
        from safetensors.torch import save_file

        from rlgraph.workers import fsdp

        body, head = self._weights()
        if self.sharded:
            if fsdp.rank() != 0:
                return
            fsdp.save_pretrained_full(self.backbone, directory, body)
        else:
            self.backbone.save_pretrained(directory)
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(directory)
        save_file({k: v.contiguous() for k, v in head.items()}, str(Path(directory) / VALUE_HEAD_FILE))

    def load(self, directory: str | Path) -> None:
        """Weights of a folder written by `save` (the architecture must match)."""
        from transformers import AutoModel

        loaded = AutoModel.from_pretrained(directory, dtype=next(self.backbone.parameters()).dtype)
        self.backbone.load_state_dict(loaded.state_dict())
        self.load_value_head(Path(directory) / VALUE_HEAD_FILE)

    def load_value_head(self, file: str | Path) -> None:
        from safetensors.torch import load_file

        self.value_head.load_state_dict(load_file(str(file), device=str(self.device)))

    def optimizer_state(self) -> dict[str, Any]:
        from rlgraph.workers import fsdp

        return fsdp.optimizer_state(self._both(), self.optim) if self.sharded else self.optim.state_dict()

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        from rlgraph.workers import fsdp

        if self.sharded:
            fsdp.load_optimizer_state(self._both(), self.optim, state)
        else:
            self.optim.load_state_dict(state)


def _maybe_tokenizer(path: str) -> Any:
    """The folder's tokenizer, saved next to the critic so its checkpoint is a complete HF folder."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError):
        return None
