"""Merged AST blocks -> Program: block kinds, keys and value types, against the schema."""

from __future__ import annotations

import difflib

from rlgraph.diagnostics import Diagnostic, error
from rlgraph.lang import ast
from rlgraph.lang.loader import Loaded
from rlgraph.lang.program import Decl, Program, Values
from rlgraph.lang.schema import (BLOCKS, FOREIGN_NAMES, ROLE_KEYS, ROLE_KINDS, BlockSchema, TypeMismatch,
                                 plain_value)


def did_you_mean(name: str, options) -> str:
    options = list(options)
    if FOREIGN_NAMES.get(name) in options:  # verl's or TRL's name for the key: no typo, another spelling
        return f"did you mean `{FOREIGN_NAMES[name]}`? (rlgraph's name for `{name}`)"
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
    return f"did you mean `{close[0]}`?" if close else ""


def _a(word: str) -> str:
    return f"{'an' if word[0] in 'aeiou' else 'a'} {word}"


def _allowed(keys) -> str:
    return "allowed: " + ", ".join(f"`{k}`" for k in sorted(keys))


def _role_kind(block: ast.Block, diagnostics: list[Diagnostic]) -> str | None:
    entry = block.get("kind")
    if isinstance(entry, ast.Assign):
        value = entry.value
        if isinstance(value, ast.Ident) and value.value in ROLE_KINDS:
            return value.value
        shown = value.value if isinstance(value, (ast.Ident, ast.String)) else "this value"
        diagnostics.append(error("unknown-kind", f"`{shown}` is not a role kind", value.span,
                                 did_you_mean(str(shown), ROLE_KINDS), _allowed(ROLE_KINDS)))
        return None
    if block.name in ROLE_KINDS:
        return block.name
    diagnostics.append(error(
        "missing-key", f"role `{block.name}` needs a `kind`", block.name_span or block.span,
        f"add `kind = actor` (or rollout, ref, critic, reward_model); a role named after its kind needs none",
        did_you_mean(block.name or "", ROLE_KINDS)))
    return None


def _convert_entries(block: ast.Block, schema: BlockSchema, keys: dict, prefix: str, where: str,
                     values: dict, spans: dict, diagnostics: list[Diagnostic], kind: str | None = None,
                     invalid: set | None = None) -> None:
    """`invalid` collects the keys written with a wrong value: they keep no value, and reading them later
    raises (rlgraph.lang.program.Values), so no check runs on a default the user did not write."""
    invalid = set() if invalid is None else invalid
    for entry in block.entries:
        if isinstance(entry, ast.Block):
            sub = schema.blocks.get(entry.keyword)
            if sub is None:
                if entry.keyword in keys:
                    diagnostics.append(error("wrong-type", f"`{entry.keyword}` is a key, not a block",
                                             entry.keyword_span, f"write `{entry.keyword} = value`"))
                else:
                    diagnostics.append(error("unknown-key", f"{where} has no block `{entry.keyword}`",
                                             entry.keyword_span, did_you_mean(entry.keyword, schema.blocks),
                                             _allowed(list(keys) + list(schema.blocks))))
                continue
            nested_values, nested_spans, nested_invalid = {}, {}, set()
            convert = _convert_open if sub.open else _convert_entries
            convert(entry, sub, sub.keys, f"{prefix}{entry.keyword}.", f"`{entry.keyword}`",
                    nested_values, nested_spans, diagnostics, invalid=nested_invalid)
            values[entry.keyword] = _with_defaults(sub, nested_values, invalid=nested_invalid)
            spans.update(nested_spans)
            spans[prefix + entry.keyword] = entry.keyword_span
            continue
        key = keys.get(entry.key)
        if key is None:
            if entry.key in schema.blocks:
                diagnostics.append(error("wrong-type", f"`{entry.key}` is a block, not a value", entry.key_span,
                                         f"write `{entry.key} {{ key = value }}`"))
                continue
            owners = [k for k, table in ROLE_KEYS.items() if entry.key in table] if kind else []
            nested = [name for name, sub in schema.blocks.items() if entry.key in sub.keys]
            hint = (f"`{entry.key}` belongs to {' and '.join(owners)} roles" if owners else
                    f"`{entry.key}` is a key of `{nested[0]}`: write `{nested[0]} {{ {entry.key} = ... }}`"
                    if nested else did_you_mean(entry.key, list(keys) + list(schema.blocks)))
            diagnostics.append(error("unknown-key", f"{where} has no key `{entry.key}`", entry.key_span,
                                     hint, _allowed(keys)))
            continue
        try:
            values[entry.key] = key.type.convert(entry.value)
        except TypeMismatch as exc:
            diagnostics.append(error("wrong-type", f"wrong value for `{prefix}{entry.key}`: {exc}",
                                     entry.value.span, f"`{entry.key}`: {key.doc}"))
            invalid.add(entry.key)
            continue
        invalid.discard(entry.key)
        spans[prefix + entry.key] = entry.value.span
        if isinstance(entry.value, ast.List):  # `train[1]`: a late check can point at one item of a list
            spans.update({f"{prefix}{entry.key}[{i}]": item.span for i, item in enumerate(entry.value.items)})


def _convert_open(block: ast.Block, schema: BlockSchema, keys: dict, prefix: str, where: str,
                  values: dict, spans: dict, diagnostics: list[Diagnostic], invalid: set | None = None) -> None:
    """Any `key = value` (a user function's arguments), each value as Python; no nested blocks."""
    for entry in block.entries:
        if isinstance(entry, ast.Block):
            diagnostics.append(error("wrong-type", f"{where} holds values, not blocks", entry.keyword_span,
                                     f"write `{entry.keyword} = value`"))
            continue
        try:
            values[entry.key] = plain_value(entry.value)
        except TypeMismatch as exc:
            diagnostics.append(error("wrong-type", f"wrong value for `{prefix}{entry.key}`: {exc}", entry.value.span))
            if invalid is not None:
                invalid.add(entry.key)
            continue
        spans[prefix + entry.key] = entry.value.span


def _with_defaults(schema: BlockSchema, values: dict, keys=None, invalid=()) -> Values:
    keys = schema.keys if keys is None else keys
    filled = {name: key.default for name, key in keys.items()}
    filled.update({name: _with_defaults(sub, {}) for name, sub in schema.blocks.items()})
    filled.update(values)
    return Values(filled, invalid)


def to_program(loaded: Loaded) -> tuple[Program, list[Diagnostic]]:
    diagnostics: list[Diagnostic] = []
    program = Program(loaded.root, loaded.sources, step=loaded.step)
    tables = {"model": program.models, "pool": program.pools, "role": program.roles, "reward": program.rewards,
              "transform": program.transforms, "loss": program.losses, "env": program.envs}
    owners: dict[str, Decl] = {}
    for block in loaded.blocks:
        schema = BLOCKS.get(block.keyword)
        if schema is None:
            diagnostics.append(error("unknown-block", f"`{block.keyword}` is not a kind of block",
                                     block.keyword_span, did_you_mean(block.keyword, list(BLOCKS) + ["step"]),
                                     _allowed(list(BLOCKS) + ["step", "include"])))
            continue
        if schema.named and block.name is None:
            diagnostics.append(error("missing-name", f"a `{block.keyword}` needs a name", block.keyword_span,
                                     f"write `{block.keyword} NAME {{ ... }}`"))
            continue
        if not schema.named and block.name is not None:
            diagnostics.append(error("unexpected-name", f"`{block.keyword}` takes no name", block.name_span,
                                     f"write `{block.keyword} {{ ... }}`"))
            continue
        kind = _role_kind(block, diagnostics) if block.keyword == "role" else None
        keys = schema.keys
        if kind:
            keys = {"kind": schema.keys["kind"], **ROLE_KEYS[kind]}
        where = f"{_a(kind)} role" if kind else f"`{block.keyword}`"
        values, spans, invalid = {}, {}, set()
        _convert_entries(block, schema, keys, "", where, values, spans, diagnostics, kind=kind, invalid=invalid)
        if block.keyword == "role" and kind not in ("actor", "critic"):
            optim = block.get("optim")
            if isinstance(optim, ast.Block):  # only trained roles have an optimizer
                diagnostics.append(error("unknown-key", f"{where} has no block `optim`", optim.keyword_span,
                                         "only actor and critic roles are trained"))
        lora = block.get("lora") if block.keyword == "role" else None
        if isinstance(lora, ast.Block) and kind not in ("actor", None):  # adapters train the policy only
            diagnostics.append(error("unknown-key", f"{where} has no block `lora`", lora.keyword_span,
                                     "LoRA adapters go on the actor (a reference policy on the actor's model is its "
                                     "base with the adapters off)"))
        val = block.get("val") if block.keyword == "role" else None
        if isinstance(val, ast.Block) and kind not in ("rollout", None):  # validation generates with a rollout
            diagnostics.append(error("unknown-key", f"{where} has no block `val`", val.keyword_span,
                                     "validation sampling goes on the rollout: `role rollout { val { temperature = "
                                     "0.6  n = 4 } }`"))
        for name, key in keys.items():
            if key.required and block.get(name) is None:  # a wrong value was reported already
                diagnostics.append(error("missing-key", f"`{block.keyword}{' ' + block.name if block.name else ''}` "
                                         f"needs `{name}`", block.name_span or block.keyword_span,
                                         f"add `{name} = ...` ({key.doc})"))
        decl = Decl(block.keyword, block.name, _with_defaults(schema, values, keys, invalid), spans,
                    block.name_span or block.keyword_span, kind)
        if block.name is None:
            setattr(program, block.keyword, decl)
            continue
        if block.name in owners:
            first = owners[block.name]
            diagnostics.append(error("duplicate-name", f"`{block.name}` is declared as {_a(first.keyword)} and "
                                     f"as {_a(block.keyword)}", decl.span,
                                     "every model, pool, role, reward, transform, loss and env needs its own name",
                                     notes=[("first declared", first.span)]))
            continue
        owners[block.name] = decl
        tables[block.keyword][block.name] = decl
    return program, diagnostics
