"""LoRA adapters on a policy's model, with peft.

The actor keeps its plain transformers module (`PolicyWorker.module`) with peft's LoRA layers injected into
it: every forward pass through that module runs the adapters, so scoring, the hybrid engine's generation,
gradient checkpointing and the optimizer see one module as before. The `PeftModel` around it is kept only
for what peft does with the whole: `save_pretrained` (adapter_config.json + adapter_model.safetensors) and
`disable_adapter()`, under which the same module computes the base model: the reference policy, with no
second copy of the weights.

A rollout with weights of its own takes plain model weights (the HF engine knows nothing of adapters), so
the weight sync sends merged weights, W + B A * alpha / rank, one layer at a time (`merged_weights`): the
actor's own base weights are never merged in place (an unmerge would not give back the same bits).
"""

from __future__ import annotations

import contextlib
import json
import warnings
from pathlib import Path
from typing import Any, Iterator

import torch

from rlgraph.contract.settings import LoraSettings

ADAPTER_CONFIG = "adapter_config.json"  # what peft's save_pretrained writes beside adapter_model.safetensors
ADAPTER = "default"  # peft's adapter name; a policy has one


def is_adapter_folder(path: str | Path) -> bool:
    """A folder written by `PeftModel.save_pretrained` (a LoRA actor's checkpoint), not a whole model."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


def base_model_path(folder: str | Path) -> str:
    """The base model an adapter folder was trained on (`base_model_name_or_path` of its adapter_config.json)."""
    file = Path(folder) / ADAPTER_CONFIG
    try:
        base = json.loads(file.read_text())["base_model_name_or_path"]
    except (OSError, ValueError, KeyError) as err:
        raise ValueError(f"{file} does not name its base model ({type(err).__name__}: {err})") from None
    if not base or not Path(base).is_dir():
        raise ValueError(f"the base model of the adapters in {folder}, {base!r} (base_model_name_or_path in "
                         f"{ADAPTER_CONFIG}), is not a folder on this machine")
    return base


def peft_config(settings: LoraSettings) -> Any:
    from peft import LoraConfig

    targets = settings.target_modules
    return LoraConfig(r=settings.rank, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                      target_modules=targets if isinstance(targets, str) else list(targets), bias="none",
                      task_type="CAUSAL_LM")


def add_adapters(module: torch.nn.Module, settings: LoraSettings, *, seed: int,
                 adapters_from: str | Path | None = None) -> Any:
    """`module` with LoRA layers injected (in place); returns the PeftModel around it. Only the adapters
    require grad. `adapters_from`: a folder of saved adapters to start from (a resume), which must have
    been trained with the same rank, alpha and targets.

    The adapters' random init draws from a generator seeded by `seed`, not from the process's global
    stream, so that a run and its resume see the same global RNG."""
    from peft import PeftModel, get_peft_model

    config = peft_config(settings)
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        # peft asks transformers about gradient checkpointing with a name transformers 5 deprecates
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        torch.manual_seed(seed)
        if adapters_from is None:
            peft_model = get_peft_model(module, config)
        else:
            _check_same_adapters(adapters_from, config)
            peft_model = PeftModel.from_pretrained(module, str(adapters_from), is_trainable=True)
    # peft casts nothing when the base is fp32; the base stays frozen
    return peft_model


def _check_same_adapters(folder: str | Path, config: Any) -> None:
    saved = json.loads((Path(folder) / ADAPTER_CONFIG).read_text())
    want = {"r": config.r, "lora_alpha": config.lora_alpha,
            "target_modules": _targets(config.target_modules)}
    have = {"r": saved.get("r"), "lora_alpha": saved.get("lora_alpha"),
            "target_modules": _targets(saved.get("target_modules"))}
    # peft writes "all-linear" out as the module names it found: compare only lists the spec wrote out
    if isinstance(want["target_modules"], str) or isinstance(have["target_modules"], str):
        want.pop("target_modules"), have.pop("target_modules")
    if want != have:
        raise ValueError(f"the adapters in {folder} were trained with {have}, but this run's lora settings are "
                         f"{want}: resume with the same settings, or start over (--no-resume)")


def _targets(targets: Any) -> Any:
    return sorted(targets) if isinstance(targets, (list, tuple, set)) else targets


def adapter_layers(module: torch.nn.Module) -> dict[str, Any]:
    """name -> peft LoRA layer, for every layer of `module` that has adapters."""
    from peft.tuners.lora import LoraLayer

    return {name: m for name, m in module.named_modules() if isinstance(m, LoraLayer)}


def has_adapters(module: torch.nn.Module) -> bool:
    return any(".lora_A." in name for name, _ in module.named_parameters())


@contextlib.contextmanager
def adapters_disabled(peft_model: Any) -> Iterator[None]:
    """The base model: every adapter off in the block."""
    with peft_model.disable_adapter():
        yield


@contextlib.contextmanager
def adapter_dropout(module: torch.nn.Module) -> Iterator[None]:
    """The adapters' dropout on in the block (the policy stays in eval mode, so it is otherwise off)."""
    dropouts = [m for name, m in module.named_modules() if name.endswith(f"lora_dropout.{ADAPTER}")]
    for m in dropouts:
        m.train()
    try:
        yield
    finally:
        for m in dropouts:
            m.eval()


class MergedWeight:
    """The merged weight of one LoRA layer, W + delta, computed when read (`full_tensor`), as the weight
    sync reads sharded parameters: the whole model is never merged at once."""

    def __init__(self, layer: Any, base: torch.Tensor) -> None:
        self.layer, self.base = layer, base
        self.shape, self.dtype = base.shape, base.dtype

    def full_tensor(self) -> torch.Tensor:
        with torch.no_grad():
            delta = self.layer.get_delta_weight(ADAPTER)
            return (self.base.detach() + delta.to(self.base.dtype)).to(self.base.dtype)


def merged_weights(module: torch.nn.Module, state: dict[str, torch.Tensor]) -> dict[str, Any]:
    """`module`'s state dict `state` (keep_vars) under the plain model's names, the adapters merged in: a
    LoRA layer's `x.base_layer.weight` becomes `x.weight` (a MergedWeight), its adapter tensors are left out."""
    layers = adapter_layers(module)
    out: dict[str, Any] = {}
    for name, tensor in state.items():
        if ".lora_" in name:  # lora_A / lora_B / lora_dropout ... of a layer
            continue
        owner, marker, leaf = name.rpartition(".base_layer.")
        if marker and owner in layers:
            name = f"{owner}.{leaf}"
            if leaf == "weight":
                tensor = MergedWeight(layers[owner], tensor)
        out[name] = tensor
    return out


def merged_state_dict(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A CPU copy of the merged weights under the plain model's names."""
    weights = merged_weights(module, module.state_dict(keep_vars=True))
    return {name: (t.full_tensor() if isinstance(t, MergedWeight) else t).detach().to("cpu", copy=True)
            for name, t in weights.items()}


def save_adapters(peft_model: Any, directory: str | Path, base_path: str) -> None:
    """adapter_config.json (naming `base_path`, the local folder of the base) + adapter_model.safetensors."""
    peft_model.peft_config[ADAPTER].base_model_name_or_path = str(base_path)
    # no embedding layers: "auto" would look for the base model on the Hugging Face Hub
    peft_model.save_pretrained(str(directory), save_embedding_layers=False)


def trainable_count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad)
