"""Models: names -> local folders, the built-in tiny models and the script that makes them.

    resolve_model_path("builtin:arith-gpt")   # shipped in rlgraph/models/weights, checked against its sha256
    resolve_model_path("/path/to/a/folder")   # returned as an absolute path
    greedy_accuracy(model, tokenizer, rows)   # from rlgraph.models.eval

Names are imported lazily: `import rlgraph.models` imports neither torch nor transformers.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ModelNotFoundError": "rlgraph.models.registry",
    "CorruptModelError": "rlgraph.models.registry",
    "BUILTIN_MODELS": "rlgraph.models.registry",
    "resolve_model_path": "rlgraph.models.registry",
    "builtin_model_folder": "rlgraph.models.registry",
    "greedy_accuracy": "rlgraph.models.eval",
    "greedy_completions": "rlgraph.models.eval",
    "build_char_tokenizer": "rlgraph.models.char_tokenizer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'rlgraph.models' has no attribute {name!r}")
