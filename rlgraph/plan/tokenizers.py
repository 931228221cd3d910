"""A reward model must read the tokens it was trained on.

It scores the rollout's token ids as they are, unless its role sets `retokenize`. With the tokenizer of
another model family those ids mean other words, and an id past the end of its vocabulary (a Qwen2
policy, 152k ids, before a Llama-3 reward model, 128k) is a device-side assert on the first step. The
check compares what it can read without torch or transformers: the tokenizers' own files when both models
are local folders, else the vocabulary sizes the spec or config.json give.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from rlgraph.compiler.topology import model_of
from rlgraph.contract.settings import ModelSettings
from rlgraph.diagnostics import Diagnostic, error
from rlgraph.lang.program import Program
from rlgraph.plan.memory import model_shape
from rlgraph.plan.resolve import model_of_settings


def check_tokenizers(program: Program, models: dict[str, ModelSettings | None]) -> list[Diagnostic]:
    """`models`: the models' settings (resolve.models_settings)."""
    base = Path(program.path).parent
    policies = {model_of(program, role) for role in program.roles.values() if role.kind == "rollout"} - {None}
    out = []
    for role in program.roles.values():
        if role.kind != "reward_model" or role["retokenize"]:  # the schema fills in its default
            continue
        rm_name = role.get("model")
        for policy_name in sorted(policies):
            if rm_name == policy_name or rm_name not in program.models or policy_name not in program.models:
                continue
            found = _difference(model_of_settings(models, policy_name), model_of_settings(models, rm_name), base)
            if found:
                out.append(error(
                    "tokenizer-mismatch",
                    f"reward model `{role.name}` reads the rollout's token ids, but model `{rm_name}` and the "
                    f"policy's model `{policy_name}` have different tokenizers ({found})",
                    role.span_of("model"),
                    f"set `retokenize = true` on `{role.name}` to score the decoded text with the reward model's "
                    "own tokenizer (as verl does), or use a reward model trained with the policy's tokenizer",
                    label="another tokenizer"))
                break
    return out


def _difference(policy: ModelSettings, reward_model: ModelSettings, base: Path) -> str:
    """How the two models' tokenizers differ, or "" when they are the same or it cannot be told."""
    prints = [_fingerprint(m.path or "", base) for m in (policy, reward_model)]
    if None not in prints:
        return "" if prints[0] == prints[1] else "their tokenizer.json files differ"
    vocabs = [model_shape(m, base).vocab for m in (policy, reward_model)]
    if None not in vocabs and vocabs[0] != vocabs[1]:
        return f"vocabularies of {vocabs[0]} and {vocabs[1]} ids"
    return ""


def _fingerprint(path: str, base: Path) -> str | None:
    """A hash of a local tokenizer's vocabulary and added tokens (its tokenizer.json), or None."""
    if not path or path.startswith("builtin:"):
        return None
    for folder in (Path(path), base / path):
        file = folder / "tokenizer.json"
        try:
            if file.is_file():
                data = json.loads(file.read_text(encoding="utf-8"))
                model = data.get("model") or {}
                key = {"vocab": model.get("vocab"), "added": [(t.get("id"), t.get("content"))
                                                                for t in data.get("added_tokens") or []]}
                return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
        except (OSError, ValueError, AttributeError):
            return None
    return None
