"""A trained policy out of a run: the model of a checkpoint's role folder, as a plain Hugging Face model folder
(`export`, for `rlgraph export`) or in memory (`load_model`, for `rlgraph.load`); `role_folder` finds that
folder in a run directory, a checkpoint or a role's folder.

The actor of a LoRA run is saved as adapters (peft's adapter_config.json + adapter_model.safetensors) beside
the base model they name: both merge them into the base (W + B A x alpha / rank). A full fine-tuning
checkpoint is already a whole model and is copied. What `export` writes holds the model and its tokenizer,
and `AutoModelForCausalLM.from_pretrained(DIR)` loads it with no peft and no rlgraph. torch, transformers
and peft load only when a model does.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from rlgraph.contract.stages import newest_checkpoint_folder

_MODEL_FILES = ("config.json", "adapter_config.json")


class ExportError(Exception):
    """What is wrong with the source or the destination, said for the user."""


def export(folder: Path, out: Path, *, base: str | None = None) -> str:
    """Write the model of a role's checkpoint folder to `out`; how (merged adapters or a copy), as words."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out} already exists and is not an empty folder; give --out a new folder")
    from rlgraph.workers import lora

    if not lora.is_adapter_folder(folder):
        shutil.copytree(folder, out, dirs_exist_ok=True)
        return ""
    merged, tokenizer, base = _merged(folder, base)
    out.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(out)
    tokenizer.save_pretrained(out)
    rank = json.loads((folder / lora.ADAPTER_CONFIG).read_text()).get("r")
    return f" (LoRA rank {rank} merged into {base})"


def load_model(folder: Path, *, base: str | None = None) -> tuple[Any, Any]:
    """(model, tokenizer) of a role's checkpoint folder, in memory: what `export` writes, loaded (rlgraph.load)."""
    from rlgraph.workers import lora

    if lora.is_adapter_folder(folder):
        model, tokenizer, _ = _merged(folder, base)
        return model, tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)


def _merged(folder: Path, base: str | None) -> tuple[Any, Any, str]:
    """A LoRA folder's adapters merged into their base (W + B A x alpha / rank), its tokenizer, and the base."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlgraph.workers import lora

    if base is None:
        try:
            base = lora.base_model_path(folder)
        except ValueError as err:
            raise ExportError(f"{err}; pass --base FOLDER, the model the run started from") from None
    elif not Path(base).is_dir():
        raise ExportError(f"--base {base} is not a folder")
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    merged = PeftModel.from_pretrained(model, str(folder)).merge_and_unload()
    # the run saves the tokenizer beside its adapters; an older folder may only have the base's
    tokenizer_from = folder if (folder / "tokenizer_config.json").is_file() else Path(base)
    return merged, AutoTokenizer.from_pretrained(tokenizer_from), base


def role_folder(source: Path, role: str | None) -> tuple[Path, str]:
    """The folder to export and a description of it: a role folder as given, else the role (default: the
    actor) of the checkpoint, or of the newest checkpoint of a run directory."""
    if not source.exists():
        raise ExportError(f"{source} does not exist; give a run directory, a checkpoint or a role's folder in one")
    if any((source / name).is_file() for name in _MODEL_FILES):
        return source, f"{source}"
    checkpoint = source
    if (source / "checkpoints").is_dir() or not (source / "trainer_state.pt").is_file():
        found = newest_checkpoint_folder(source)
        if found is None:
            raise ExportError(f"{source} has no checkpoint to export (no checkpoints/step_<N>); a run writes one "
                              "at train.checkpoint_every and at its last step")
        checkpoint = found
    name = role or _actor_of(checkpoint)
    folder = checkpoint / name
    if not any((folder / n).is_file() for n in _MODEL_FILES):
        kept = sorted(p.name for p in checkpoint.iterdir() if any((p / n).is_file() for n in _MODEL_FILES))
        raise ExportError(f"{checkpoint} has no model of role `{name}`"
                          + (f"; it has {', '.join(f'`{k}`' for k in kept)} (pass --role)" if kept else ""))
    return folder, f"`{name}` of {checkpoint}"


def _actor_of(checkpoint: Path) -> str:
    """The actor role of a checkpoint, from the plan it was trained with; `actor` when that does not say."""
    try:
        roles = json.loads((checkpoint / "plan.json").read_text()).get("roles") or []
    except (OSError, ValueError):
        return "actor"
    actors = [r["name"] for r in roles if r.get("kind") == "actor"]
    if len(actors) > 1:
        raise ExportError(f"{checkpoint} has several actors ({', '.join(actors)}); pass --role NAME")
    return actors[0] if actors else "actor"
