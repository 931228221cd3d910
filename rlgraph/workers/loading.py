"""Loading a model onto a device: shared by the workers and the engines (one place, no import circle)."""

from __future__ import annotations

from typing import Any

import torch


def default_device(device: str | torch.device | None) -> torch.device:
    """The given device, else the first GPU that this process sees, else the CPU; a GPU with its index (under
    Ray the process passes its own: rlgraph/runtime/process.py DeviceProcess.device)."""
    from rlgraph.workers.cuda import indexed_device

    return indexed_device(device or ("cuda" if torch.cuda.is_available() else "cpu"))


def as_dtype(dtype: torch.dtype | str) -> torch.dtype:
    """torch.bfloat16 or "bfloat16" (as a spec writes it) -> torch.bfloat16."""
    if isinstance(dtype, torch.dtype):
        return dtype
    value = getattr(torch, str(dtype).removeprefix("torch."), None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}; expected e.g. 'float32' or 'bfloat16'")
    return value


def load_causal_lm(model_path: str, dtype: torch.dtype, device: torch.device) -> tuple[torch.nn.Module, Any]:
    from transformers import AutoModelForCausalLM

    from rlgraph.models import resolve_model_path

    path = resolve_model_path(model_path)  # a local folder; `builtin:` models are built on first use
    module = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)
    return module, load_tokenizer(path)


def load_tokenizer(model_path: str) -> Any:
    """The folder's tokenizer: tokenizer.json, or a sentencepiece tokenizer.model / tiktoken file that
    transformers converts (with the `sentencepiece` / `tiktoken` packages of the run extra)."""
    from transformers import AutoTokenizer

    from rlgraph.models import resolve_model_path

    return AutoTokenizer.from_pretrained(resolve_model_path(model_path))
