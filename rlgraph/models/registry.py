"""Model names -> local folders. No downloads: a model is a built-in, made here on first use, or a
folder already on this machine.

`builtin:<name>` models are listed in BUILTIN_MODELS with the folder they build into (versioned, so a
changed recipe builds afresh) and the function that builds them. A build writes into a temporary
folder next to the final one and renames it into place, under a file lock: a reader never sees half
a model, and two processes asking at once build it once.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

from rlgraph.data.cache import build_lock, cache_dir, temp_sibling
from rlgraph.models.build_arith_gpt import MODEL_VERSION as ARITH_GPT_VERSION  # light imports
from rlgraph.models.build_arith_rm import MODEL_VERSION as ARITH_RM_VERSION
from rlgraph.models.recipe import BUILD_REPORT

BUILTIN_PREFIX = "builtin:"


class ModelNotFoundError(Exception):
    """A model name that is neither a built-in model nor a local folder."""


@dataclasses.dataclass(frozen=True)
class BuiltinModel:
    folder: str  # under $RLGRAPH_CACHE/models
    builder: str | Callable[[Path], object]  # "module:function" (imported when needed), called as f(out_dir)
    about: str


BUILTIN_MODELS: dict[str, BuiltinModel] = {
    "arith-gpt": BuiltinModel(
        folder=f"arith-gpt-v{ARITH_GPT_VERSION}",
        builder="rlgraph.models.build_arith_gpt:build_arith_gpt",
        about="tiny rotary GPT that adds two-digit numbers about half the time (policy for builtin:arith)",
    ),
    "arith-rm": BuiltinModel(
        folder=f"arith-rm-v{ARITH_RM_VERSION}",
        builder="rlgraph.models.build_arith_rm:build_arith_rm",
        about="reward model for builtin:arith: a sequence classifier scoring 1 for a right sum, 0 for a wrong one "
              "(0.93 held-out accuracy; built from arith-gpt on first use, about 3.5 min on one core)",
    ),
}


def resolve_model_path(name: str) -> str:
    """The absolute local folder of model `name`, building a built-in model on first use."""
    if name.startswith(BUILTIN_PREFIX):
        return str(_builtin_folder(name[len(BUILTIN_PREFIX) :]))
    path = Path(name).expanduser()
    if path.is_dir():
        return str(path.resolve())
    builtins = ", ".join(f"{BUILTIN_PREFIX}{n}" for n in sorted(BUILTIN_MODELS))
    raise ModelNotFoundError(
        f"model {name!r} is not a local folder"
        + (" (it is a file; give the folder that holds config.json)" if path.exists() else "")
        + f"; rlgraph never downloads models. Give the path of a folder saved with save_pretrained, "
        f"or a built-in model: {builtins}"
    )


def builtin_model_folder(name: str) -> Path:
    """Where built-in model `name` lives (whether or not it is built yet)."""
    return cache_dir() / "models" / _builtin(name).folder


def _builtin(name: str) -> BuiltinModel:
    try:
        return BUILTIN_MODELS[name]
    except KeyError:
        builtins = ", ".join(f"{BUILTIN_PREFIX}{n}" for n in sorted(BUILTIN_MODELS))
        message = f"no built-in model {BUILTIN_PREFIX}{name}; the built-in models are: {builtins}"
        raise ModelNotFoundError(message) from None


def _builtin_folder(name: str) -> Path:
    folder = builtin_model_folder(name)
    if _is_complete(folder):
        return folder
    with build_lock(folder):
        if _is_complete(folder):  # built by another process while we waited
            return folder
        logging.getLogger(__name__).info("building %s%s into %s (first use)", BUILTIN_PREFIX, name, folder)
        build = _builtin(name).builder
        if isinstance(build, str):
            module, _, function = build.partition(":")
            build = getattr(importlib.import_module(module), function)
        tmp = temp_sibling(folder)
        try:
            build(tmp)
            if folder.exists():  # an incomplete leftover of an older, interrupted layout
                shutil.rmtree(folder)
            tmp.rename(folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _is_complete(folder: Path) -> bool:
    # The build writes its report last and the folder appears whole by rename.
    return (folder / BUILD_REPORT).is_file()
